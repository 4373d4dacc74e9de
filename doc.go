// Package herald is a transactional outbox for Go.
//
// A service writes its business rows and the events that describe them in
// one database transaction with [Writer.WriteTx]. A [Relay] claims committed
// events in short transactions, hands them to a [Publisher] outside any
// transaction, and acknowledges them in one statement per batch. Delivery is
// at least once: consumers must be idempotent, keyed by the event id.
//
// The package imports no database driver and no broker SDK. Store drivers
// live in driver/heraldpg (PostgreSQL through pgx v5 or database/sql), and
// publishers in publish/heraldnats (NATS JetStream).
//
// Guarantees, each shown by a test:
//   - an event row exists if and only if its transaction committed;
//   - every committed event is published once the broker is reachable;
//   - an event from a rolled-back transaction is never published;
//   - progress is tracked by row state, never by an id cursor, so a
//     transaction that commits late is still delivered;
//   - a relay that lost its claim cannot change rows: every state write
//     checks the claim token, and lease times come from the database clock.
package herald
