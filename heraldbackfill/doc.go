// Package heraldbackfill writes events for rows that already exist: a
// team adopting the outbox on a running service, or a new consumer that
// needs the current state, gets one event per row of a table or a query,
// published by the relay like any other.
//
//	b, err := heraldbackfill.New(driver, &heraldbackfill.Config{
//		Name:   "orders-2026-11",
//		Topic:  "orders",
//		Source: heraldbackfill.Source{Table: "orders", KeyColumns: []string{"id"}},
//		Rate:   2000,
//	})
//	sum, err := b.Run(ctx)
//
// The command `herald backfill` is this package on the command line.
//
// # Batches and resuming
//
// A backfill reads its source in the order of its key columns, a batch
// at a time after the last key it recorded, and writes the batch's
// events, the Herald-Backfill header naming it, and its new last key in
// one transaction of its own. A crash, a kill or Ctrl-C keeps a batch
// whole or not at all: running the backfill again (same Name) resumes
// after the last key that committed, so no row gets two events and none
// is skipped. The record is a row of the outbox's <table>_backfills table
// (made by the first backfill). Ctrl-C stops after the batch under way.
//
// # Order against live writes of the same rows
//
// A live transaction that changes a row the backfill also reads must
// never see its event overtaken by an older, backfilled state of that
// row. The relay publishes a key's events in the order of the outbox's
// seq column, which each event takes when it is written. A batch:
//
//  1. draws its events' seq values first, before it reads anything;
//  2. waits until every transaction that held a lock on the outbox
//     table at that moment has ended (every transaction that wrote an
//     event holds one from its INSERT to its end, so every event with a
//     lower seq has now committed or rolled back);
//  3. reads its rows FOR SHARE, in a new transaction, and writes their
//     events with the seq values of step 1, and its progress, and
//     commits.
//
// Take a live transaction L that changes row r, and the batch B that
// reads r. If L's event has a lower seq than B's, L drew it before B
// drew its own, so L had ended before B read r (step 2): B read L's
// state or a later one, and its event comes after L's, as it should. If
// L's event has a higher seq, it comes after B's; and L's change of r is
// either later than B's read (B's FOR SHARE lock made L wait for B's
// commit, or L came after it), so L's state is the newer one, or it
// committed before B read r, between steps 1 and 3: then B read L's
// state or a later one, and L's event follows with a state B already
// carried, or an older one when two live changes of r committed in that
// window of a few milliseconds (the last of them then comes last, with
// the state B read). So a backfilled event is never published after a
// live event of its row that carries a newer state, whether the live
// transaction writes its event before or after it changes the row, and
// a row's last event is always its latest state.
//
// # Throttling
//
// Config.Rate caps the rows per second; Config.MaxBacklog pauses the
// backfill while the outbox holds more ready events than that (a count
// bounded by the ready index), so that the relay works through live
// events and the backfill's without a large queue in front of the live
// ones.
//
// Only PostgreSQL (driver/heraldpg) implements the Store seam today.
package heraldbackfill
