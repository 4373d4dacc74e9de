// Package herald is a transactional outbox for Go.
//
// A service describes what happened as a [Message] and writes it with
// [Writer.WriteTx] in the same database transaction as its business rows,
// so the event exists if and only if that transaction commits. A [Relay]
// claims committed events in short transactions, hands them to a
// [Publisher] outside any transaction, and acknowledges them in one
// statement per batch. Delivery is at least once: consumers must be
// idempotent, keyed by the event id.
//
// Those four are the product. The rest of this package is what they are
// made of: [RelayConfig] and [RetryPolicy]; the [Store] seam the drivers
// implement; for those who write a Publisher, [SendInRounds],
// [EventHeaders] and the errors that tell the relay what happened
// ([BatchError], [Permanent], [Unavailable], [ErrHeldBack]); [Observer] and
// its hooks for metrics and tracing.
//
// The package imports the standard library and github.com/google/uuid
// only: no database driver, no broker SDK (a test checks). The other
// packages of the module bring those in:
//
//   - store drivers, which give a Writer its transaction and a Relay its
//     Store: driver/heraldpg (PostgreSQL through pgx v5 or database/sql,
//     plain or partitioned by time; driver/heraldpg/heraldpgprom exports
//     the table's size), driver/heraldsqlite (SQLite, pure Go) and
//     driver/heraldmysql (MySQL 8 and MariaDB 10.6 or newer);
//   - driver/heraldcdc: the change-data-capture source, which reads a
//     PostgreSQL outbox's events from the write-ahead log instead of
//     claiming them (driver/heraldcdc/heraldcdcprom: its replication slot's
//     metrics);
//   - publishers: publish/heraldnats (NATS JetStream),
//     publish/heraldkafka (Kafka, franz-go), publish/heraldredis (Redis
//     Streams), publish/heraldrabbit (RabbitMQ), publish/heraldmqtt
//     (MQTT 5), publish/heraldaws (Amazon SQS and SNS),
//     publish/heraldpubsub (Google Cloud Pub/Sub), publish/heraldwebhook
//     (signed HTTP webhooks) and publish/heraldroute (a destination per
//     topic, each with its own limits and circuit breaker); heraldce: the
//     CloudEvents 1.0 mapping every publisher can send; heraldspec: a
//     destination's URL turned into its publisher, each publisher package
//     parsing its own URL form (what the daemon opens its destinations
//     with); heraldclaim: claim checks, payloads too large for a broker
//     stored in an object store first (publish/heraldaws's S3Store) and
//     resolved by the consumer;
//   - heraldadmin: what operators see of an outbox (counts, dead events,
//     parked keys; requeue and discard), implemented by every driver;
//     heraldui: the operator page over it, an http.Handler a service
//     mounts in its own server (the daemon mounts it too);
//   - heraldprom: Prometheus metrics; heraldotel: trace context through
//     the outbox (OpenTelemetry); heraldinbox: the consumer's side, which
//     makes a handler idempotent;
//   - heraldbackfill: events for rows that exist already (a table or a
//     query), written in batches of their own transactions, resumable,
//     throttled, never overtaking a live event of the same row
//     (PostgreSQL);
//   - heraldtest: assertions for a service's own tests (the events its
//     code wrote, a Publisher that records what a relay sends);
//   - contract kits for new implementations: driver/heralddrivertest (the
//     suite every store driver passes) and publish/publishertest (the
//     suite every publisher passes);
//   - heraldvet: a go vet analyzer that reports dual writes and misused
//     WriteTx calls (cmd/heraldvet; heraldvet/golangci for golangci-lint);
//   - cmd/herald: the relay as a daemon, and the operator CLI; cmd/herald-lab:
//     the demo and the benchmarks, on embedded servers.
//
// The manual, one page per topic, is in the repository's docs directory;
// its README.md maps it.
//
// Guarantees, each shown by a test:
//   - an event row exists if and only if its transaction committed;
//   - every committed event is published once the broker is reachable;
//   - an event from a rolled-back transaction is never published;
//   - progress is tracked by row state, never by an id cursor, so a
//     transaction that commits late is still delivered;
//   - a relay that lost its claim cannot change rows: every state write
//     checks the claim token, and lease times come from the database clock;
//   - by default, the events of one key reach the broker in the order they
//     committed, and a failing event holds back only the later events of
//     its own key.
package herald
