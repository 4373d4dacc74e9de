package heraldmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	heraldpkg "github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
)

// What a producer learned of each transaction it tried.
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
	at      time.Time // when the producer learned the outcome
}

// failoverLog is every event the producers tried, by id.
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

// failoverPool opens a pool on the DSN of both servers, through the
// driver's own DSN form and connector.
func failoverPool(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	c, err := heraldmysql.ParseDSN(&heraldspec.Database{DSN: dsn})
	require.NoError(t, err)
	connector, err := c.Connector()
	require.NoError(t, err)
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// A MariaDB primary with a semi-synchronous replica fails over under
// load: the replica is promoted and the primary killed while producers
// commit through the Writer and two polling relays publish, all on the
// DSN that names both servers with target_session_attrs=read-write. Every
// event whose commit was acknowledged is published, nothing from a
// transaction that rolled back is, each key's events are first published
// in commit order, and the relays publish again from the new primary by
// themselves.
//
// In either order: promoted first, the replica stops taking the
// primary's commits, which then wait for an acknowledgement until the
// primary dies; killed first, the primary leaves only a read-only replica
// until its promotion, which every connection refuses.
func TestRelaysAndWriterFollowAFailoverToASemiSyncReplica(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	t.Run("PromotedThenPrimaryKilled", func(t *testing.T) {
		t.Parallel()
		testFailover(t, func(pair *testenv.MariaDBPair, _ *failoverLog) {
			pair.Promote(t)
			pair.StopPrimary(t)
		})
	})
	t.Run("PrimaryKilledThenPromoted", func(t *testing.T) {
		t.Parallel()
		testFailover(t, func(pair *testenv.MariaDBPair, log *failoverLog) {
			pair.StopPrimary(t)
			// Until the promotion no server takes writes: transactions
			// fail to begin.
			killedAt := time.Now()
			require.Eventually(t, func() bool { return len(log.ids(notCommitted, killedAt)) >= 20 },
				60*time.Second, 5*time.Millisecond)
			pair.Promote(t)
		})
	})
}

// testFailover runs the failover test with fail, which fails the pair
// over while producers and relays run.
func testFailover(t *testing.T, fail func(*testenv.MariaDBPair, *failoverLog)) {
	ctx := context.Background()
	pair := testenv.StartMariaDBPair(t)
	// A dead host must not cost a connection attempt long.
	dsn := pair.URL + "&timeout=2s"

	writerPool := failoverPool(t, dsn)
	w, err := heraldmysql.NewWriter(nil)
	require.NoError(t, err)

	rec := heralddrivertest.NewRecorder()
	// While down, the destination of two keys refuses their events, so
	// that events acknowledged on the old primary are still unpublished
	// when it dies: only the new primary can publish them.
	var down atomic.Bool
	rec.Fail = func(env heraldpkg.Envelope, _ int) error {
		if down.Load() && (env.Key == "key-0" || env.Key == "key-1") {
			return heraldpkg.Unavailable(errors.New("test: destination down"))
		}
		return nil
	}
	var logs testenv.LogBuffer
	for i := range 2 {
		store, err := heraldmysql.New(failoverPool(t, dsn), nil)
		require.NoError(t, err)
		if i == 0 {
			require.NoError(t, store.Migrate(ctx))
		}
		relay, err := heraldpkg.NewRelay(&heraldpkg.RelayConfig{Store: store, Publisher: rec,
			Logger:       slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
			PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond,
			OutageBackoffCap: 100 * time.Millisecond,
			// Rows a claim on the old primary leased, whose acknowledgement
			// the failover lost, wait out their lease on the new one.
			Lease: 3 * time.Second, PublishTimeout: time.Second, RescueInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, relay.Start(ctx))
		t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })
	}

	log := &failoverLog{events: map[string]failoverEvent{}}
	// writeOne tries one transaction of event seq of key; every third
	// one rolls back.
	writeOne := func(key string, seq int) {
		id := heraldpkg.NewID()
		msg := heraldpkg.Message{ID: id, Topic: "failover", Key: key, Payload: []byte(strconv.Itoa(seq))}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		outcome := func() failoverOutcome {
			tx, err := writerPool.BeginTx(ctx, nil)
			if err != nil {
				return notCommitted
			}
			defer func() { _ = tx.Rollback() }()
			if err := w.WriteTx(ctx, tx, msg); err != nil {
				return notCommitted
			}
			if seq%3 == 1 {
				return notCommitted // the deferred rollback
			}
			if err := tx.Commit(); err != nil {
				return ambiguous
			}
			return acked
		}()
		log.add(id, failoverEvent{key: key, seq: seq, outcome: outcome, at: time.Now()})
	}
	stop := make(chan struct{})
	var producers sync.WaitGroup
	for k := range 4 {
		key := fmt.Sprintf("key-%d", k)
		producers.Go(func() {
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
	stopProducers := sync.OnceFunc(func() { close(stop); producers.Wait() })
	t.Cleanup(stopProducers)

	// Under load: events committed and published on the first primary.
	require.Eventually(t, func() bool {
		d, _ := rec.Total()
		return d >= 200
	}, 60*time.Second, 5*time.Millisecond)

	down.Store(true)
	downAt := time.Now()
	require.Eventually(t, func() bool { return len(log.ids(acked, downAt)) >= 50 },
		60*time.Second, 5*time.Millisecond)

	failingAt := time.Now()
	fail(pair, log)
	failedAt := time.Now()
	var unpublished int
	for _, id := range log.ids(acked, time.Time{}) {
		if e, _ := log.get(id); e.at.Before(failedAt) && rec.Count(id) == 0 {
			unpublished++
		}
	}
	require.Positive(t, unpublished, "no event acknowledged on the old primary was left for the new one")

	down.Store(false)

	// The producers commit again, on the new primary.
	require.Eventually(t, func() bool { return len(log.ids(acked, failedAt)) > 0 },
		60*time.Second, 5*time.Millisecond, "no commit acknowledged after the failover")
	firstCommit := time.Since(failedAt)
	// The relays publish again, from the new primary: an event whose
	// commit was acknowledged after the failover is delivered.
	require.Eventually(t, func() bool {
		for _, id := range log.ids(acked, failedAt) {
			if rec.Count(id) > 0 {
				return true
			}
		}
		return false
	}, 60*time.Second, 5*time.Millisecond, "the relays publish nothing committed on the new primary")
	t.Logf("switch: failing over took %s; then the first commit was acknowledged after %s, and the first such event published after %s",
		failedAt.Sub(failingAt).Round(time.Millisecond), firstCommit.Round(time.Millisecond), time.Since(failedAt).Round(time.Millisecond))

	// More load on the new primary, then quiet.
	require.Eventually(t, func() bool { return len(log.ids(acked, failedAt)) >= 100 },
		60*time.Second, 5*time.Millisecond)
	stopProducers()

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
	t.Logf("all %d acknowledged events published %s after the failover",
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
	// transactions committed: the producer's sequence.
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
	t.Logf("%d events acknowledged on the old primary were unpublished at the failover", unpublished)
	t.Logf("%d events acknowledged, %d published (%d duplicates), %d ambiguous commits of which %d published; relay log: %d outage lines",
		len(committed), distinct, dups, len(ambiguous), present, strings.Count(out, "database unreachable"))
}
