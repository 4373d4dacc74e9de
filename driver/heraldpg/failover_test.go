package heraldpg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// What a writer learned of each transaction it tried.
type failoverOutcome int

const (
	// The commit returned nil: the event must be published.
	acked failoverOutcome = iota
	// Rolled back, or a statement failed before COMMIT was sent: the event
	// must never be published.
	notCommitted
	// COMMIT was sent and returned an error (the connection died under
	// it): the transaction may or may not have committed, so the event may
	// be published or not; if it is, it keeps its place in its key.
	ambiguous
)

type failoverEvent struct {
	key     string
	seq     int
	outcome failoverOutcome
	at      time.Time // when the writer learned the outcome
}

// failoverLog is every event the writers tried, by id.
type failoverLog struct {
	mu     sync.Mutex
	events map[string]failoverEvent
}

func (l *failoverLog) add(id string, e failoverEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[id] = e
}

// ids returns the ids of outcome, of the events learned after since.
func (l *failoverLog) ids(outcome failoverOutcome, since time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, e := range l.events {
		if e.outcome == outcome && !e.at.Before(since) {
			out = append(out, id)
		}
	}
	return out
}

func (l *failoverLog) get(id string) (failoverEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.events[id]
	return e, ok
}

// A primary with a synchronous standby fails over under load: the standby
// is promoted and the primary crashes (pg_ctl stop -m immediate) while
// writers commit and a polling relay publishes, both on the DSN that names
// the two servers with target_session_attrs=read-write. Every event whose
// commit was acknowledged is published, nothing from a transaction that
// did not commit is, each key's events are first published in commit
// order, and the relay publishes again from the new primary by itself.
func TestRelayAndWritersFollowAFailoverToASynchronousStandby(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	pair := testenv.StandbyPair(t)

	newPool := func() *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(pair.DSN)
		require.NoError(t, err)
		// A dead host must not cost a connection attempt long.
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	writerPool, relayPool := newPool(), newPool()
	store, err := heraldpg.New(relayPool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(nil)
	require.NoError(t, err)

	rec := heralddrivertest.NewRecorder()
	// While down, the destination of two keys refuses their events, so
	// that events acknowledged on the old primary are still unpublished
	// when it crashes: only the new primary can publish them.
	var down atomic.Bool
	rec.Fail = func(env herald.Envelope, _ int) error {
		if down.Load() && (env.Key == "key-0" || env.Key == "key-1") {
			return herald.Unavailable(errors.New("test: destination down"))
		}
		return nil
	}
	var logs testenv.LogBuffer
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: rec,
		Logger:       slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond,
		OutageBackoffCap: 100 * time.Millisecond,
		// Rows a claim on the old primary leased, whose acknowledgement
		// the crash lost, wait out their lease on the new one.
		Lease: 3 * time.Second, PublishTimeout: time.Second, RescueInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })

	log := &failoverLog{events: map[string]failoverEvent{}}
	// writeOne tries one transaction of event seq of key; every third
	// one does not commit, by a rollback or by a failed statement.
	writeOne := func(key string, seq int) {
		id := herald.NewID()
		msg := herald.Message{ID: id, Topic: "failover", Key: key, Payload: []byte(strconv.Itoa(seq))}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		outcome := func() failoverOutcome {
			tx, err := writerPool.Begin(ctx)
			if err != nil {
				return notCommitted
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if err := w.WriteTx(ctx, tx, msg); err != nil {
				return notCommitted
			}
			switch seq % 3 {
			case 1:
				return notCommitted // the deferred rollback
			case 2:
				// The transaction is aborted whatever this returns: a
				// division by zero, or a dead connection.
				_, _ = tx.Exec(ctx, `SELECT 1/0`)
				_ = tx.Commit(ctx)
				return notCommitted
			}
			if err := tx.Commit(ctx); err != nil {
				return ambiguous
			}
			return acked
		}()
		log.add(id, failoverEvent{key: key, seq: seq, outcome: outcome, at: time.Now()})
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for k := range 4 {
		key := fmt.Sprintf("key-%d", k)
		writers.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				writeOne(key, seq)
			}
		})
	}
	stopWriters := sync.OnceFunc(func() { close(stop); writers.Wait() })
	t.Cleanup(stopWriters)

	// Under load: events committed and published on the first primary.
	require.Eventually(t, func() bool {
		d, _ := rec.Total()
		return d >= 200
	}, 60*time.Second, 5*time.Millisecond)

	down.Store(true)
	downAt := time.Now()
	require.Eventually(t, func() bool { return len(log.ids(acked, downAt)) >= 50 },
		60*time.Second, 5*time.Millisecond)

	pair.Standby.Promote(t)
	pair.Primary.Crash(t)
	failedAt := time.Now()
	var unpublished int
	for _, id := range log.ids(acked, time.Time{}) {
		if e, _ := log.get(id); e.at.Before(failedAt) && rec.Count(id) == 0 {
			unpublished++
		}
	}
	require.Positive(t, unpublished, "no event acknowledged on the old primary was left for the new one")
	down.Store(false)

	// The relay publishes again, from the new primary: an event whose
	// commit was acknowledged after the crash is delivered.
	require.Eventually(t, func() bool {
		for _, id := range log.ids(acked, failedAt) {
			if rec.Count(id) > 0 {
				return true
			}
		}
		return false
	}, 60*time.Second, 5*time.Millisecond, "the relay publishes nothing committed on the new primary")
	t.Logf("first event committed after the failover published %s after the old primary crashed",
		time.Since(failedAt).Round(time.Millisecond))

	// More load on the new primary, then quiet.
	require.Eventually(t, func() bool { return len(log.ids(acked, failedAt)) >= 100 },
		60*time.Second, 5*time.Millisecond)
	stopWriters()

	committed := log.ids(acked, time.Time{})
	missing := func() (n int) {
		for _, id := range committed {
			if rec.Count(id) == 0 {
				n++
			}
		}
		return n
	}
	if !assert.Eventually(t, func() bool { return missing() == 0 }, 60*time.Second, 10*time.Millisecond) {
		t.Fatalf("%d of %d acknowledged events never published", missing(), len(committed))
	}
	t.Logf("all %d acknowledged events published %s after the crash",
		len(committed), time.Since(failedAt).Round(time.Millisecond))

	for _, id := range log.ids(notCommitted, time.Time{}) {
		require.Zero(t, rec.Count(id), "event %s of a transaction that did not commit was published", id)
	}
	var present int
	ambiguous := log.ids(ambiguous, time.Time{})
	for _, id := range ambiguous {
		if rec.Count(id) > 0 {
			present++
		}
	}

	// Each key's events are first published in the order their
	// transactions committed: the writer's sequence.
	last := map[string]int{}
	for _, env := range rec.Order() {
		e, ok := log.get(env.ID)
		require.True(t, ok, "published event %s was never written", env.ID)
		if prev, seen := last[e.key]; seen {
			require.Greater(t, e.seq, prev, "key %s: event %d first published after event %d", e.key, e.seq, prev)
		}
		last[e.key] = e.seq
	}

	distinct, dups := rec.Total()
	out := logs.String()
	t.Logf("%d events acknowledged on the old primary were unpublished when it crashed", unpublished)
	t.Logf("%d events acknowledged, %d published (%d duplicates), %d ambiguous commits of which %d published; relay log: %d outage lines",
		len(committed), distinct, dups, len(ambiguous), present, strings.Count(out, "database unreachable"))
}
