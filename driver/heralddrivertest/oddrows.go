package heralddrivertest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// OddRow is a row Driver.OddRows wrote, and what a relay must make of it.
type OddRow struct {
	ID    string
	Class string // what is odd about it, such as "attempts at the integer maximum"
	// Want is the state the row must reach: published; dead, with Reason
	// in its last_error; or, for a row the relay has no business with
	// (written published or dead, or never due), the state it was
	// written in.
	Want   heraldadmin.State
	Reason string
	// Delivered says the relay delivers the row, once.
	Delivered bool
	// Attempt, unless zero, is the attempt its delivery counts.
	Attempt int
}

// oddRowsCases check that no row another program can write stops the
// relay: one row of every odd kind of value, then many ordinary events, and
// a relay that publishes every ordinary event (in each key's order), makes
// every odd row published or dead with the reason, and reports no error
// of its database throughout, while operators' reads keep working.
var oddRowsCases = []testCase{
	{"OddRowsNeverStopAnOrderedRelay", func(t *testing.T, o *Kit) { o.oddRows(t, false) }},
	{"OddRowsNeverStopAnUnorderedRelay", func(t *testing.T, o *Kit) { o.oddRows(t, true) }},
}

// oddNormal is how many ordinary events follow the odd rows, over oddKeys
// keys.
const (
	oddNormal = 2000
	oddKeys   = 8
)

func (o *Kit) oddRows(t *testing.T, unordered bool) {
	if o.d.OddRows == nil {
		t.Skip("the driver writes no odd rows (Driver.OddRows is nil)")
	}
	odd, err := o.d.OddRows(o.ctx(), "odd")
	require.NoError(t, err)
	require.NotEmpty(t, odd)
	plain, checks := o.oddPlainRows(t, unordered)
	odd = append(odd, plain...)
	o.requireReadable(t, odd)

	// The rows this relay is to make dead: those the driver did not write
	// dead already.
	var killed []string
	for _, row := range odd {
		if row.Want == heraldadmin.StateDead && o.Get(row.ID).State != heraldadmin.StateDead {
			killed = append(killed, row.ID)
		}
	}
	normal := o.writeKeys("normal", oddNormal, oddKeys)
	store := &watchedStore{Store: o.d.Store}
	rec := NewRecorder()
	deaths := &deathWatch{}
	relay := StartRelay(t, store, rec, func(c *herald.RelayConfig) {
		c.Unordered = unordered
		c.MaxInFlight = 4
		// A long lease: the relay gives a claim Lease/2, and this test
		// fails on any store error. With the suite's 10 s, a claim had 5 s
		// of wall time, which SQLite (one writer, the race detector, the
		// relay's four batches acknowledged between claims) once exceeded
		// at a load average of 30 on two cores: a bound on the machine,
		// not on what odd rows do to a claim (the plan tests and the wait
		// below catch a claim that odd rows make slow or stop).
		c.Lease = time.Minute
		c.Observer = deaths
		c.Logger = slog.New(deathLog{c.Logger.Handler(), deaths})
	})

	var unhealthy []herald.Health
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if h := relay.Health(); h.Database != "" || h.Destination != "" {
			unhealthy = append(unhealthy, h)
		}
		distinct, _ := rec.Total()
		require.GreaterOrEqual(c, distinct, len(normal))
		for _, row := range odd {
			ev, err := o.d.Admin.GetEvent(o.ctx(), row.ID)
			require.NoError(c, err)
			require.Equal(c, row.Want, ev.State, "%s: %s", row.Class, row.ID)
		}
		// The observer hears of an acknowledgement just after the
		// database has it.
		require.ElementsMatch(c, killed, deaths.observed(), "the relay's Observer heard of every death, and of no other")
	}, time.Minute, 10*time.Millisecond, "every ordinary event published, every odd row where it belongs")
	// However a row dies (a publish failure, a row that breaks WriteTx's
	// rules, one the claim could not read), the relay counts it and logs it
	// at ERROR, as its metrics and summary count it.
	require.Equal(t, int64(len(killed)), relay.Stats().Dead, "the relay's count of dead events")
	require.ElementsMatch(t, killed, deaths.logged(), "every dead event logged at ERROR with its id")

	rec.RequireAllDeliveredOnce(t, normal)
	require.Empty(t, unhealthy, "the relay reported its database or destination failing")
	require.Empty(t, store.errors(), "a store call failed")
	if !unordered {
		for k := range oddKeys {
			var key []string // writeKeys spreads its events over the keys in turn
			for i := k; i < len(normal); i += oddKeys {
				key = append(key, normal[i])
			}
			require.Equal(t, key, rec.OrderOf(key...), "key k%d published out of order", k)
		}
	}
	for _, row := range odd {
		ev := o.Get(row.ID)
		switch row.Want {
		case heraldadmin.StateDead:
			require.Contains(t, ev.LastError, row.Reason, "%s: %s", row.Class, row.ID)
		case heraldadmin.StateReady:
			require.Zero(t, ev.Attempt, "%s: %s: a row left waiting spent no attempt", row.Class, row.ID)
		}
		if !row.Delivered {
			require.Zero(t, rec.Count(row.ID), "%s: %s was delivered", row.Class, row.ID)
			continue
		}
		require.Equal(t, 1, rec.Count(row.ID), "%s: %s", row.Class, row.ID)
		env := rec.Env(row.ID)
		if row.Attempt != 0 {
			require.Equal(t, row.Attempt, env.Attempt, "%s: %s", row.Class, row.ID)
		}
		if check := checks[row.ID]; check != nil {
			check(t, env)
		}
	}
	o.requireReadable(t, odd)
}

// oddPlainRows writes, through Driver.InsertPlain, the odd rows every
// driver's table admits alike: headers that are not all strings, payloads
// of any bytes, and an event behind an unreadable one of its key. It
// returns them with checks of what their delivery carried.
func (o *Kit) oddPlainRows(t *testing.T, unordered bool) ([]OddRow, map[string]func(*testing.T, herald.Envelope)) {
	t.Helper()
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	checks := map[string]func(*testing.T, herald.Envelope){}
	var rows []OddRow
	insert := func(row OddRow, key string, payload []byte, headers string, check func(*testing.T, herald.Envelope)) {
		id, err := o.d.InsertPlain(o.ctx(), "odd", key, payload, headers)
		require.NoError(t, err, row.Class)
		row.ID = id
		rows = append(rows, row)
		checks[id] = check
	}
	dead := func(class, reason string) OddRow {
		return OddRow{Class: class, Want: heraldadmin.StateDead, Reason: reason}
	}
	published := func(class string) OddRow {
		return OddRow{Class: class, Want: heraldadmin.StatePublished, Delivered: true, Attempt: 1}
	}

	insert(dead("a header that is a number", `herald: unreadable row: header "n" is a number, not a string`),
		"plain-1", []byte("x"), `{"s": "v", "n": 3}`, nil)
	insert(dead("a header that is a boolean", `header "b" is a boolean`), "plain-2", []byte("x"), `{"b": false}`, nil)
	insert(dead("a header that is an object", `header "o" is an object`), "plain-3", []byte("x"), `{"o": {"p": "q"}}`, nil)
	insert(dead("a reserved header", "invalid row"), "plain-4", []byte("x"), `{"Nats-Msg-Id": "spoof"}`, nil)
	insert(published("a header that is null"), "plain-5", []byte("x"), `{"gone": null, "kept": "v"}`,
		func(t *testing.T, env herald.Envelope) {
			require.Equal(t, map[string]string{"kept": "v"}, env.Headers, "a null header is not set")
		})
	insert(published("a payload of every byte"), "plain-6", every, "",
		func(t *testing.T, env herald.Envelope) { require.Equal(t, every, env.Payload) })
	insert(published("an empty payload"), "plain-7", []byte{}, "",
		func(t *testing.T, env herald.Envelope) { require.Empty(t, env.Payload) })

	// An event behind an unreadable one of its key waits, parked, when the
	// relay keeps the key's order; without order it goes.
	insert(dead("an unreadable event ahead of another of its key", `header "n" is a number`),
		"plain-behind", []byte("x"), `{"n": 1}`, nil)
	behind := OddRow{Class: "an event behind an unreadable one of its key", Want: heraldadmin.StateReady}
	if unordered {
		behind = published(behind.Class)
	}
	insert(behind, "plain-behind", []byte("x"), "", nil)
	return rows, checks
}

// requireReadable checks that every read operators and metrics make works
// with the odd rows in the table, and reads each of them.
func (o *Kit) requireReadable(t *testing.T, odd []OddRow) {
	t.Helper()
	st := o.status()
	require.GreaterOrEqual(t, st.OldestPending, time.Duration(0))
	for _, ts := range st.Topics {
		require.GreaterOrEqual(t, ts.Oldest, time.Duration(0), "%s/%s", ts.Topic, ts.State)
	}
	backlog, err := o.d.Admin.Backlog(o.ctx())
	require.NoError(t, err)
	require.NotEmpty(t, backlog)
	for _, b := range backlog {
		require.GreaterOrEqual(t, b.OldestPending, time.Duration(0), b.Topic)
	}
	_, err = o.d.Admin.BlockedKeys(o.ctx(), 100)
	require.NoError(t, err)
	listed := 0
	for _, state := range []heraldadmin.State{heraldadmin.StateReady, heraldadmin.StateClaimed,
		heraldadmin.StatePublished, heraldadmin.StateDead} {
		rows, err := o.d.Admin.ListEvents(o.ctx(), heraldadmin.EventFilter{State: state, Topic: "odd", Limit: 1000})
		require.NoError(t, err, "listing %s rows", state)
		listed += len(rows)
	}
	require.Len(t, odd, listed, "every odd row is listed")
	for _, row := range odd {
		o.Get(row.ID)
	}
}

// deathWatch is a relay's Observer and the sink of its logger's ERROR
// records: the events it heard of as dead, and those it logged at ERROR.
type deathWatch struct {
	mu       sync.Mutex
	reported []string // by the Observer
	errors   []string // event_id of ERROR log records
}

// Acknowledged implements herald.AcknowledgedHook, the only hook it needs.
func (w *deathWatch) Acknowledged(a herald.Acknowledgement) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range a.Failed {
		if f.Outcome == herald.OutcomeDead || f.Outcome == herald.OutcomeParked {
			w.reported = append(w.reported, f.ID)
		}
	}
}

func (w *deathWatch) observed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.reported)
}

func (w *deathWatch) logged() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.errors)
}

// deathLog passes a relay's log on to its handler, and tells a deathWatch
// the event_id of every ERROR record.
type deathLog struct {
	slog.Handler
	w *deathWatch
}

func (l deathLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "event_id" {
				l.w.mu.Lock()
				l.w.errors = append(l.w.errors, a.Value.String())
				l.w.mu.Unlock()
			}
			return true
		})
	}
	if !l.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

func (l deathLog) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelError || l.Handler.Enabled(ctx, level)
}

func (l deathLog) WithAttrs(as []slog.Attr) slog.Handler {
	return deathLog{l.Handler.WithAttrs(as), l.w}
}

func (l deathLog) WithGroup(name string) slog.Handler {
	return deathLog{l.Handler.WithGroup(name), l.w}
}

// watchedStore remembers every error of a store's calls.
type watchedStore struct {
	herald.Store
	mu   sync.Mutex
	errs []error
}

func (s *watchedStore) note(what string, err error) {
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, fmt.Errorf("%s: %w", what, err))
		s.mu.Unlock()
	}
}

func (s *watchedStore) errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

func (s *watchedStore) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	envs, err := s.Store.Claim(ctx, p)
	s.note("claim", err)
	return envs, err
}

func (s *watchedStore) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	res, err := s.Store.Complete(ctx, p)
	s.note("complete", err)
	return res, err
}

func (s *watchedStore) ReleaseClaim(ctx context.Context, token string) (int, error) {
	n, err := s.Store.ReleaseClaim(ctx, token)
	s.note("release", err)
	return n, err
}

func (s *watchedStore) RescueExpired(ctx context.Context, limit int) (int, error) {
	n, err := s.Store.RescueExpired(ctx, limit)
	s.note("rescue", err)
	return n, err
}

func (s *watchedStore) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	n, err := s.Store.DeletePublished(ctx, olderThan, limit)
	s.note("retention", err)
	return n, err
}
