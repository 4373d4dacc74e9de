package heralddrivertest

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// clockSkew is how far the suite lets the database's clock differ from the
// test's where it compares the two.
const clockSkew = time.Minute

// waitFor bounds every wait of the suite; cases finish far sooner unless
// the driver is broken.
const waitFor = 10 * time.Second

// Kit is one outbox under test with the helpers the suite's cases share;
// drivers' own tests use it too (NewKit). Helpers fail the test on any
// error, so they are for the test's goroutine only; the try* variants
// return errors for other goroutines and polled conditions.
type Kit struct {
	t     testing.TB
	d     *Driver
	owner string // claimed_by of the kit's claims
}

// NewKit returns the kit of d for the test t.
func NewKit(t testing.TB, d *Driver) *Kit { return newKit(t, d, "heralddrivertest") }

func newKit(t testing.TB, d *Driver, owner string) *Kit { return &Kit{t: t, d: d, owner: owner} }

func (o *Kit) ctx() context.Context { return o.t.Context() }

// msg returns a message on topic with a fresh id.
func msg(topic string) herald.Message {
	return herald.Message{ID: herald.NewID(), Topic: topic, Payload: []byte(`{"suite":true}`)}
}

// keyed returns a message of key on topic with a fresh id.
func keyed(topic, key string) herald.Message {
	m := msg(topic)
	m.Key = key
	return m
}

// claimP claims with params p, filling in a fresh token, the owner and a
// lease of a minute when unset, and checks what every claim promises.
func (o *Kit) claimP(p herald.ClaimParams) (string, []herald.Envelope) {
	o.t.Helper()
	if p.Token == "" {
		p.Token = uuid.NewString()
	}
	if p.Lease == 0 {
		p.Lease = time.Minute
	}
	p.Owner = o.owner
	envs, err := o.d.Store.Claim(o.ctx(), p)
	require.NoError(o.t, err)
	require.LessOrEqual(o.t, len(envs), p.Limit)
	require.True(o.t, slices.IsSortedFunc(envs, func(a, b herald.Envelope) int { return int(a.Seq - b.Seq) }),
		"claimed envelopes are sorted by seq")
	return p.Token, envs
}

// Write commits msgs in one transaction and returns their ids, generating
// the ids left empty.
func (o *Kit) Write(msgs ...herald.Message) []string {
	o.t.Helper()
	msgs = slices.Clone(msgs)
	ids := make([]string, len(msgs))
	for i := range msgs {
		if msgs[i].ID == "" {
			msgs[i].ID = herald.NewID()
		}
		ids[i] = strings.ToLower(msgs[i].ID)
	}
	require.NoError(o.t, o.d.Write(o.ctx(), msgs, true))
	return ids
}

// WriteN commits n messages on topic, in transactions of up to 500.
func (o *Kit) WriteN(topic string, n int) []string {
	o.t.Helper()
	var ids []string
	for n > 0 {
		batch := make([]herald.Message, min(n, 500))
		for i := range batch {
			batch[i] = msg(topic)
		}
		ids = append(ids, o.Write(batch...)...)
		n -= len(batch)
	}
	return ids
}

// Claim claims with a fresh token, which it returns.
func (o *Kit) Claim(limit int, lease time.Duration) (string, []herald.Envelope) {
	o.t.Helper()
	token := uuid.NewString()
	return token, o.claimWith(token, limit, lease)
}

func (o *Kit) claimWith(token string, limit int, lease time.Duration) []herald.Envelope {
	o.t.Helper()
	envs, err := o.tryClaim(token, limit, lease)
	require.NoError(o.t, err)
	return envs
}

// tryClaim claims and checks what every claim promises: at most limit
// envelopes, in write (seq) order, each counting its attempt.
func (o *Kit) tryClaim(token string, limit int, lease time.Duration) ([]herald.Envelope, error) {
	envs, err := o.d.Store.Claim(o.ctx(), herald.ClaimParams{Token: token, Owner: o.owner, Limit: limit, Lease: lease})
	if err != nil {
		return nil, err
	}
	if len(envs) > limit {
		return nil, fmt.Errorf("claim of limit %d returned %d envelopes", limit, len(envs))
	}
	if !slices.IsSortedFunc(envs, func(a, b herald.Envelope) int { return cmp.Compare(a.Seq, b.Seq) }) {
		return nil, errors.New("claimed envelopes are not sorted by seq")
	}
	for _, e := range envs {
		if e.Attempt < 1 {
			return nil, fmt.Errorf("claimed envelope %s has attempt %d", e.ID, e.Attempt)
		}
	}
	return envs, nil
}

// Complete acknowledges.
func (o *Kit) Complete(p herald.CompleteParams) herald.CompleteResult {
	o.t.Helper()
	res, err := o.d.Store.Complete(o.ctx(), p)
	require.NoError(o.t, err)
	return res
}

// put writes msgs and moves them to state. Claiming is the only way there,
// so no other row may be ready when put runs: it checks.
func (o *Kit) put(state heraldadmin.State, msgs ...herald.Message) []string {
	o.t.Helper()
	ids := o.Write(msgs...)
	o.settle(state, ids)
	return ids
}

// settle moves ready rows to state: claimed (for an hour), published or
// dead. No other row may be ready.
func (o *Kit) settle(state heraldadmin.State, ids []string) {
	o.t.Helper()
	if len(ids) == 0 || state == heraldadmin.StateReady {
		return
	}
	token, envs := o.Claim(len(ids)+1, time.Hour)
	require.ElementsMatch(o.t, ids, envIDs(envs), "settle found other ready rows")
	switch state {
	case heraldadmin.StateClaimed:
	case heraldadmin.StatePublished:
		require.Equal(o.t, len(ids), o.Complete(herald.CompleteParams{Token: token, Published: ids}).Published)
	case heraldadmin.StateDead:
		failed := make([]herald.Failure, len(ids))
		for i, id := range ids {
			failed[i] = herald.Failure{ID: id, Outcome: herald.OutcomeDead, Error: "made dead by the suite"}
		}
		require.ElementsMatch(o.t, ids, o.Complete(herald.CompleteParams{Token: token, Failed: failed}).Failed)
	default:
		o.t.Fatalf("settle: unknown state %q", state)
	}
}

func (o *Kit) backdate(d time.Duration, ids ...string) {
	o.t.Helper()
	for _, id := range ids {
		require.NoError(o.t, o.d.Backdate(o.ctx(), id, d))
	}
}

func (o *Kit) rescue(limit int) int {
	o.t.Helper()
	n, err := o.d.Store.RescueExpired(o.ctx(), limit)
	require.NoError(o.t, err)
	return n
}

// databaseNow reads the database's clock: the created_at of a row it
// writes now. The row (topic "probe") waits an hour, out of the way of
// claims.
func (o *Kit) databaseNow() time.Time {
	o.t.Helper()
	probe := msg("probe")
	probe.AvailableAt = time.Now().Add(time.Hour)
	return o.Get(o.Write(probe)[0]).CreatedAt
}

// Get reads the row of id.
func (o *Kit) Get(id string) heraldadmin.EventRow {
	o.t.Helper()
	ev, err := o.d.Admin.GetEvent(o.ctx(), id)
	require.NoError(o.t, err)
	return ev
}

// requireGone checks the row does not exist.
func (o *Kit) requireGone(id string) {
	o.t.Helper()
	_, err := o.d.Admin.GetEvent(o.ctx(), id)
	require.ErrorIs(o.t, err, heraldadmin.ErrNotFound, "event %s", id)
}

func (o *Kit) list(f heraldadmin.EventFilter) []heraldadmin.EventRow {
	o.t.Helper()
	rows, err := o.d.Admin.ListEvents(o.ctx(), f)
	require.NoError(o.t, err)
	return rows
}

func (o *Kit) status() heraldadmin.Status {
	o.t.Helper()
	st, err := o.d.Admin.Status(o.ctx())
	require.NoError(o.t, err)
	return st
}

// Counts returns the row counts by "topic/state".
func (o *Kit) Counts() map[string]int64 {
	o.t.Helper()
	return countsOf(o.status())
}

func countsOf(st heraldadmin.Status) map[string]int64 {
	out := make(map[string]int64, len(st.Topics))
	for _, ts := range st.Topics {
		out[ts.Topic+"/"+string(ts.State)] += ts.Count
	}
	return out
}

func envIDs(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

func rowIDs(rows []heraldadmin.EventRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func between(t *testing.T, d, lo, hi time.Duration, what string) {
	t.Helper()
	require.True(t, d >= lo && d < hi, "%s: %v, want in [%v, %v)", what, d, lo, hi)
}

// released is the acknowledgement of a relay that stops before the broker
// confirmed ids: ready again at once, attempts refunded.
func released(ids ...string) []herald.Failure {
	out := make([]herald.Failure, len(ids))
	for i, id := range ids {
		out[i] = herald.Failure{ID: id, Outcome: herald.OutcomeReleased}
	}
	return out
}

// idsOfKey returns, in order, the ids of envs with key.
func idsOfKey(envs []herald.Envelope, key string) []string {
	var ids []string
	for _, e := range envs {
		if e.Key == key {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// BeginSQL returns a Driver.Begin for a database/sql database whose
// driver's writer is w. record is the statement that inserts a business
// row, its id the only argument.
func BeginSQL(db *sql.DB, w *herald.Writer[*sql.Tx], record string) func(context.Context) (Tx, error) {
	return func(ctx context.Context) (Tx, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return sqlTx{tx: tx, w: w, record: record}, nil
	}
}

type sqlTx struct {
	tx     *sql.Tx
	w      *herald.Writer[*sql.Tx]
	record string
}

func (x sqlTx) Write(ctx context.Context, msgs ...herald.Message) error {
	return x.w.WriteTx(ctx, x.tx, msgs...)
}

func (x sqlTx) Record(ctx context.Context, id string) error {
	_, err := x.tx.ExecContext(ctx, x.record, id)
	return err
}

func (x sqlTx) Commit(context.Context) error   { return x.tx.Commit() }
func (x sqlTx) Rollback(context.Context) error { return x.tx.Rollback() }

// writeConcurrently runs writers goroutines that each commit txs
// transactions of the messages next(writer) returns, one transaction after
// the other, and returns the ids of every message written.
func (o *Kit) writeConcurrently(t *testing.T, writers, txs int, next func(writer int) []herald.Message) []string {
	t.Helper()
	var (
		mu   sync.Mutex
		ids  []string
		wg   sync.WaitGroup
		errs = make(chan error, writers)
	)
	for w := range writers {
		wg.Go(func() {
			for range txs {
				msgs := next(w)
				if err := o.d.Write(o.ctx(), msgs, true); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, m := range msgs {
					ids = append(ids, m.ID)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return ids
}
