// Package heraldtest helps a service's tests check what it does with Herald:
// which events a transaction wrote into the outbox, and what a relay
// published.
//
// Inside a test, run the code under test in a transaction and assert on
// the events it wrote before the transaction ends; the rows are visible to
// the transaction that wrote them, committed or not:
//
//	reader, _ := heraldpg.NewReader(cfg) // or heraldpg.NewSQLReader, heraldsqlite.NewReader
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	if err := orders.Place(ctx, tx, order); err != nil { // the code under test
//		t.Fatal(err)
//	}
//	heraldtest.RequireWrittenTx(ctx, t, reader, tx, heraldtest.Event{
//		Topic: "orders.placed", Key: order.ID, Type: "order.placed",
//		JSON:  `{"id":"o-1","total":4200}`,
//	})
//
// After a commit or a rollback, RequireWritten and RequireNotWritten read
// through the store the relay uses (*heraldpg.Driver, *heraldsqlite.Driver).
//
// Recorder is a herald.Publisher for tests of a relay or of anything built
// on one: it records what it is given, fails the events it is told to fail,
// honouring the per-key contract of herald.Publisher, and lets a test wait
// for deliveries without sleeping.
//
// The package depends on the standard library and Herald's root package
// only, not on a database driver or a test framework: the assertions take a
// [TB], which *testing.T satisfies, and the drivers' readers satisfy
// [TxReader] and [Reader] without this package importing them.
package heraldtest
