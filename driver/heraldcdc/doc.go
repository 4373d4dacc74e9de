// Package heraldcdc reads committed outbox rows from PostgreSQL's
// write-ahead log: a publication on the outbox table and a logical
// replication slot decoded with pgoutput. Events come in commit order, and
// the position confirmed to PostgreSQL (the slot's confirmed_flush_lsn)
// only ever covers transactions whose every event was acknowledged, so a
// crash redelivers at most what was in flight and never skips a commit.
//
// This package is the change-data-capture source's reading side: Stream
// (connection, slot, decoding, confirmation) and Tracker (which position
// may be confirmed while acknowledgements return out of order). The
// relay's CDC mode builds on it.
package heraldcdc
