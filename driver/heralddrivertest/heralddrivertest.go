// Package heralddrivertest is the conformance suite every Herald store
// driver must pass: what "correct" means for a store, and for a relay
// running on it, checked the same way against each database. A driver's
// test calls Exercise with a Harness; BenchClaim, BenchComplete and
// BenchRelayDrain measure the same driver.
//
// A driver that cannot support a case declares it in Harness.Skip with the
// reason; the case then skips with that reason instead of failing.
//
// The package also exports the kit that drivers' own tests share: Kit
// (write, claim and read rows through a Driver), Recorder (a publisher that
// remembers what it delivered) and StartRelay.
//
// The cases are grouped by concern: write.go (the writer and the
// transaction it joins), claim.go, complete.go (acknowledgements),
// rescue.go, retention.go, admin.go (operators' reads and actions),
// ordering.go (per-key order at the store), pause.go (operators' pauses,
// at the store and in a relay), relays.go (the relays' heartbeats, listed
// by heraldadmin.Relays), backlog.go, relay.go (the
// relay's guarantees end to end, on the driver's store), and oddrows.go
// (rows another program wrote, of values Herald never writes).
package heralddrivertest

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Harness builds drivers for the suite.
type Harness struct {
	// Name labels the driver in test names, such as "pgx" or "sqlite".
	Name string
	// New returns a fresh, migrated, empty outbox for one test or
	// benchmark, cleaned up with t.Cleanup. Tests run in parallel: each
	// call must be isolated.
	New func(t testing.TB) *Driver
	// Skip names suite cases this driver cannot support, with the reason.
	Skip map[string]string
	// KeyEveryMessage gives each message the suite writes without a key
	// a key of its own, so that every claim takes the per-key path of an
	// ordered claim: for a driver whose keyed claims work differently
	// from keyless ones (heraldpg's key leases), the whole suite
	// again on that path.
	KeyEveryMessage bool
}

// Driver is one outbox under test.
type Driver struct {
	Store herald.Store
	Admin heraldadmin.Admin
	// Begin opens a transaction of the driver's database, as an
	// application holds one: the events it writes with the driver's writer
	// and its own business rows commit, or vanish, together.
	Begin func(ctx context.Context) (Tx, error)
	// BusinessRows returns the ids of the business rows that committed
	// transactions recorded (Tx.Record), in any order.
	BusinessRows func(ctx context.Context) ([]string, error)
	// InsertPlain inserts one outbox row with plain SQL, as a program in
	// another language does: topic, key and payload, and headers as JSON
	// text unless headers is empty; every other column keeps its default.
	// No validation runs on the way in. It returns the new row's id.
	InsertPlain func(ctx context.Context, topic, key string, payload []byte, headers string) (string, error)
	// InsertVersioned is InsertPlain giving topic, payload and the two
	// version columns: event_version, and aggregate_version (NULL when
	// nil). It returns the database's error as it is, so that a test can
	// see a value the table refuses.
	InsertVersioned func(ctx context.Context, topic string, payload []byte, eventVersion int64, aggregateVersion *int64) (string, error)
	// Open returns another store on the same outbox table over
	// connections of its own, as a second process would hold it; they are
	// closed when t ends.
	Open func(t testing.TB) herald.Store
	// Backdate moves a row's created_at and published_at (when set) back
	// by d, as if the row were that much older.
	Backdate func(ctx context.Context, id string, d time.Duration) error
	// MaxPayloadBytes is the cap the driver's writer was built with; zero
	// means herald.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// OddRows writes rows of values the outbox's columns admit but Herald
	// never writes (see OddRow), one key each. It first drops the checks
	// that refuse such rows (migration 004), for the rest of the test: the
	// relay must survive them even where the checks are missing. Nil skips
	// the cases that need it.
	OddRows func(ctx context.Context, topic string) ([]OddRow, error)
	// Ceiling, when set, claims at most limit of the oldest ready events
	// and marks them published in one statement, with no token, lease or
	// acknowledgement: not a correct relay (a crash after it loses the
	// batch), but the reference BenchRelayDrain measures the relay
	// against. It returns nothing once no event is ready.
	Ceiling func(ctx context.Context, limit int) ([]herald.Envelope, error)
}

// Tx is an open transaction of the driver's database.
type Tx interface {
	// Write writes msgs with the driver's writer, inside the transaction.
	Write(ctx context.Context, msgs ...herald.Message) error
	// Record inserts a business row of the application's own, keyed by id:
	// a second row with the same id fails with the database's unique
	// constraint error.
	Record(ctx context.Context, id string) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Write writes msgs in one transaction, then commits it, or rolls it back
// when commit is false. It returns the writer's error unchanged, after
// rolling back: a refused write leaves nothing behind.
func (d *Driver) Write(ctx context.Context, msgs []herald.Message, commit bool) error {
	tx, err := d.Begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.Write(ctx, msgs...); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if !commit {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

func (d *Driver) payloadCap() int {
	if d.MaxPayloadBytes > 0 {
		return d.MaxPayloadBytes
	}
	return herald.DefaultMaxPayloadBytes
}

// Exercise runs every case of the suite against the driver h builds, each
// as a parallel subtest with an outbox of its own from h.New.
//
// Cases speak to the driver only through the Driver's fields (Store, Admin,
// Begin, ...), never SQL, so the same expectations hold for every dialect:
// counts come from Admin.Status, rows from Admin.GetEvent and
// Admin.ListEvents. Timestamps a driver returns are compared with each
// other, which involves the database clock only; where a case compares one
// with the test's clock it allows clockSkew. Delayed messages are the
// exception: their AvailableAt comes from the test's clock, so the database
// must run on a clock that agrees with it to well under 300ms (any local
// or NTP-synchronised server does).
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.Name == "" {
		t.Fatal("heralddrivertest: Harness.Name and Harness.New are required")
	}
	all := allCases()
	known := make(map[string]bool, len(all))
	for _, c := range all {
		if known[c.name] {
			t.Fatalf("heralddrivertest: two cases are named %q", c.name)
		}
		known[c.name] = true
	}
	for name := range h.Skip {
		// A misspelt skip would leave a driver's known gap failing under a
		// name nobody declared, and the declared one rotting.
		if !known[name] {
			t.Errorf("heralddrivertest: Harness.Skip names %q, which is no case of the suite", name)
		}
	}
	for name := range longCases {
		if !known[name] {
			t.Errorf("heralddrivertest: longCases names %q, which is no case of the suite", name)
		}
	}
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := h.Skip[c.name]; ok {
				t.Skip(reason)
			}
			if longCases[c.name] && testing.Short() {
				t.Skip("long: left out under -short; the full suite runs it")
			}
			t.Parallel()
			d := h.New(t)
			if h.KeyEveryMessage {
				d = keyEveryMessage(d)
			}
			c.run(t, newKit(t, d, "heralddrivertest/"+h.Name))
		})
	}
}

// keyEveryMessage returns d whose writes give each keyless message a key
// of its own (Harness.KeyEveryMessage).
func keyEveryMessage(d *Driver) *Driver {
	k := *d
	k.Begin = func(ctx context.Context) (Tx, error) {
		tx, err := d.Begin(ctx)
		return keyingTx{tx}, err
	}
	if d.InsertPlain != nil {
		k.InsertPlain = func(ctx context.Context, topic, key string, payload []byte, headers string) (string, error) {
			if key == "" {
				key = newKey()
			}
			return d.InsertPlain(ctx, topic, key, payload, headers)
		}
	}
	return &k
}

type keyingTx struct{ Tx }

func (tx keyingTx) Write(ctx context.Context, msgs ...herald.Message) error {
	msgs = slices.Clone(msgs)
	for i := range msgs {
		if msgs[i].Key == "" && msgs[i].AggregateID == "" { // the writer keys those by their aggregate
			msgs[i].Key = newKey()
		}
	}
	return tx.Tx.Write(ctx, msgs...)
}

// keys counts the keys newKey gave out.
var keys atomic.Int64

// newKey returns a key no message has, above every key it gave before:
// keys sort in the order they were given, so that an ordered claim, which
// walks the keys in order, takes the suite's events in the order it
// wrote them, as a claim by age takes keyless ones.
func newKey() string { return fmt.Sprintf("k%019d", keys.Add(1)) }

// testCase is one case of the suite. Names are stable: drivers refer to
// them in Skip.
type testCase struct {
	name string
	run  func(t *testing.T, o *Kit)
}

// longCases run relays over thousands of events, for seconds (a minute on
// SQLite under the race detector): the inner loop, `go test -short`,
// leaves them out.
var longCases = map[string]bool{
	"SeveralRelaysPublishEveryEventExactlyOnce":           true,
	"SeveralOrderedRelaysKeepEveryKeysOrderUnderFailures": true,
	"RelaysThatDeleteOnPublishKeepEveryGuarantee":         true,
	"OddRowsNeverStopAnOrderedRelay":                      true,
	"OddRowsNeverStopAnUnorderedRelay":                    true,
}

func allCases() []testCase {
	return slices.Concat(writeCases, claimCases, completeCases, rescueCases, retentionCases,
		adminCases, publishedCases, retryingCases, orderingCases, pauseCases, relaysCases, backlogCases, relayCases, oddRowsCases)
}
