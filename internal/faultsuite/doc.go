// Package faultsuite is Herald's fault-injection suite: a relay against
// PostgreSQL (driver/heraldpg; one case on MySQL too, driver/heraldmysql)
// and NATS JetStream (publish/heraldnats) while the network between them
// breaks, the database restarts, and relays and
// producers are killed. It has tests only; they run with the rest of the
// module's tests (go test ./...).
//
// Every case checks the same guarantees once the fault has healed: no
// committed event lost, nothing published from a rolled-back transaction,
// every business row with its one event and every event with its business
// row, duplicates within what the faults left in flight, each key's events
// first delivered in commit order, every event published by a deadline, and
// no relay transaction open for a second or more.
//
// The faults come from testenv.Proxy (TCP between the relay and either
// server), testenv.PrivateCluster (a database restart) and SIGKILL of
// relays and producers run as child processes (this test binary,
// re-executed).
package faultsuite
