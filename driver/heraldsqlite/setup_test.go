package heraldsqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is what most tests need: a fresh migrated database file, the
// driver and a writer.
type bundle struct {
	path   string
	db     *sql.DB
	driver *heraldsqlite.Driver
	writer *herald.Writer[*sql.Tx]
}

func setup(t testing.TB) *bundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db := open(t, path)
	d, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(context.Background()))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	return &bundle{path: path, db: db, driver: d, writer: w}
}

// open opens path and closes it at the end of the test.
func open(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := heraldsqlite.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// write commits msgs in one transaction and returns their ids.
func (b *bundle) write(t testing.TB, msgs ...herald.Message) []string {
	t.Helper()
	ids := make([]string, len(msgs))
	for i := range msgs {
		if msgs[i].ID == "" {
			msgs[i].ID = herald.NewID()
		}
		ids[i] = msgs[i].ID
	}
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, b.writer.WriteTx(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())
	return ids
}

// writeN commits n events on topic in transactions of perTx events.
func (b *bundle) writeN(t testing.TB, topic string, n, perTx int) []string {
	t.Helper()
	var ids []string
	for n > 0 {
		k := min(n, perTx)
		msgs := make([]herald.Message, k)
		for i := range msgs {
			msgs[i] = herald.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%50), Payload: []byte(`{"n":1}`)}
		}
		ids = append(ids, b.write(t, msgs...)...)
		n -= k
	}
	return ids
}

func (b *bundle) count(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE `+where, args...).Scan(&n))
	return n
}

func (b *bundle) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	_, err := b.db.Exec(query, args...)
	require.NoError(t, err)
}

func (b *bundle) row(t testing.TB, id string) heraldadmin.EventRow {
	t.Helper()
	ev, err := b.driver.GetEvent(context.Background(), id)
	require.NoError(t, err)
	return ev
}

// startRelay starts a relay on store with fast test timings and stops it at
// the end of the test.
func startRelay(t testing.TB, store herald.Store, pub herald.Publisher, mod func(*herald.RelayConfig)) *herald.Relay {
	t.Helper()
	cfg := &herald.RelayConfig{
		Store:            store,
		Publisher:        pub,
		Logger:           slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		BatchSize:        100,
		PollInterval:     2 * time.Millisecond,
		IdlePollInterval: 20 * time.Millisecond,
		RescueInterval:   50 * time.Millisecond,
		Lease:            10 * time.Second,
		PublishTimeout:   5 * time.Second,
		Retry:            herald.RetryPolicy{Base: 20 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 5, MaxAge: time.Hour},
		OutageBackoffCap: 50 * time.Millisecond,
	}
	if mod != nil {
		mod(cfg)
	}
	r, err := herald.NewRelay(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// recorder is a Publisher that records every delivery.
type recorder struct {
	mu        sync.Mutex
	delivered map[string]int
	envs      map[string]herald.Envelope
}

func newRecorder() *recorder {
	return &recorder{delivered: map[string]int{}, envs: map[string]herald.Envelope{}}
}

func (r *recorder) publisher() herald.Publisher {
	return herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, env := range batch {
			r.delivered[env.ID]++
			r.envs[env.ID] = env
		}
		return nil
	})
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered[id]
}

// total returns how many distinct events were delivered and how many
// deliveries were duplicates.
func (r *recorder) total() (distinct, duplicates int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.delivered {
		distinct++
		duplicates += n - 1
	}
	return distinct, duplicates
}

// requireAllDeliveredOnce waits until every id was delivered and checks none
// twice.
func requireAllDeliveredOnce(t *testing.T, rec *recorder, ids []string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec.count(id) == 0 {
				return false
			}
		}
		return true
	}, 60*time.Second, 5*time.Millisecond, "not every event was delivered")
	for _, id := range ids {
		require.Equal(t, 1, rec.count(id), "event %s delivered more than once", id)
	}
}
