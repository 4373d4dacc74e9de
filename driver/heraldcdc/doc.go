// Package heraldcdc reads committed outbox rows from PostgreSQL's
// write-ahead log: a publication on the outbox table and a logical
// replication slot decoded with pgoutput. Events come in commit order, and
// the position confirmed to PostgreSQL (the slot's confirmed_flush_lsn)
// only ever covers transactions whose every event was acknowledged, so a
// crash redelivers at most what was in flight and never skips a commit.
//
// Heartbeats: when the outbox is idle and other tables are busy, pgoutput
// sends nothing, the confirmed position stays put and the slot keeps all
// their WAL. So every Config.HeartbeatInterval the stream writes a
// non-transactional logical decoding message (prefix herald.heartbeat,
// the slot's name as content) on a connection of its own. When the
// stream reads it back and every transaction it handed out has been
// confirmed, it confirms the heartbeat's position itself; otherwise it
// drops it. Callers see no heartbeats: they keep confirming Transaction
// ends (Tracker.Confirmed), and the stream never confirms past a
// transaction handed out and not confirmed.
//
// Monitoring: SlotStatus reads the slot's retained WAL, lag in bytes and
// wal_status; Stream.OldestUnconfirmed gives the lag in time; package
// heraldcdcprom exports both to Prometheus.
//
// This package is the change-data-capture source's reading side: Stream
// (connection, slot, decoding, confirmation) and Tracker (which position
// may be confirmed while acknowledgements return out of order). The
// relay's CDC mode builds on it.
//
// Imported, it opens the Source of a PostgreSQL database that heraldspec
// parsed: heraldspec.ParsedDatabase.OpenSource, with a *Config for the
// slot's settings.
package heraldcdc
