package heraldpg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/heraldtest"
)

func TestMain(m *testing.M) {
	runOrderChildIfAsked()
	heraldtest.Main(m)
}

// bundle is what most tests need: a pool, a fresh migrated outbox table in
// its own schema, the driver and a pgx writer.
type bundle struct {
	pool   *pgxpool.Pool
	cfg    *heraldpg.Config
	driver *heraldpg.Driver
	writer *herald.Writer[pgx.Tx]
	table  string // quoted, schema-qualified
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := heraldtest.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: heraldtest.Schema(t)}
	d, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(context.Background()))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	return &bundle{pool: pool, cfg: cfg, driver: d, writer: w, table: d.Table()}
}

// write commits msgs in one transaction and returns their ids.
func (b *bundle) write(t *testing.T, msgs ...herald.Message) []string {
	t.Helper()
	ids := make([]string, len(msgs))
	for i := range msgs {
		if msgs[i].ID == "" {
			msgs[i].ID = herald.NewID()
		}
		ids[i] = msgs[i].ID
	}
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.writer.WriteTx(ctx, tx, msgs...))
	require.NoError(t, tx.Commit(ctx))
	return ids
}

// writeN commits n events on topic, in transactions of up to 500.
func (b *bundle) writeN(t *testing.T, topic string, n int) []string {
	t.Helper()
	var ids []string
	for n > 0 {
		k := min(n, 500)
		msgs := make([]herald.Message, k)
		for i := range msgs {
			msgs[i] = herald.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%50), Payload: []byte(`{"n":1}`)}
		}
		ids = append(ids, b.write(t, msgs...)...)
		n -= k
	}
	return ids
}

func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM `+b.table+` WHERE `+where, args...).Scan(&n))
	return n
}

func (b *bundle) row(t *testing.T, id string) heraldadmin.EventRow {
	t.Helper()
	ev, err := b.driver.GetEvent(context.Background(), id)
	require.NoError(t, err)
	return ev
}

// startRelay starts a relay on the bundle's table with fast test timings and
// stops it at the end of the test.
func (b *bundle) startRelay(t *testing.T, pub herald.Publisher, mod func(*herald.RelayConfig)) *herald.Relay {
	t.Helper()
	cfg := &herald.RelayConfig{
		Store:            b.driver,
		Publisher:        pub,
		Logger:           testLogger(t),
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

// recorder is a Publisher that records every confirmed delivery. Fail, when
// set, decides per envelope: a non-nil error fails that envelope, and holds
// back the later events of its key in the batch, as the Publisher contract
// asks.
type recorder struct {
	mu        sync.Mutex
	delivered map[string]int
	envs      map[string]herald.Envelope
	attempts  map[string]int
	order     []string // ids in delivery order
	Fail      func(env herald.Envelope, attempt int) error
}

func newRecorder() *recorder {
	return &recorder{delivered: map[string]int{}, envs: map[string]herald.Envelope{}, attempts: map[string]int{}}
}

func (r *recorder) Publish(ctx context.Context, batch []herald.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := make([]error, len(batch))
	failed := false
	failedKeys := map[string]bool{}
	for i, env := range batch {
		if env.Key != "" && failedKeys[env.Key] {
			errs[i] = herald.ErrHeldBack
			continue
		}
		r.attempts[env.ID]++
		if r.Fail != nil {
			if err := r.Fail(env, r.attempts[env.ID]); err != nil {
				errs[i], failed = err, true
				failedKeys[env.Key] = true
				continue
			}
		}
		r.delivered[env.ID]++
		r.envs[env.ID] = env
		r.order = append(r.order, env.ID)
	}
	if failed {
		return &herald.BatchError{Errs: errs}
	}
	return nil
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered[id]
}

func (r *recorder) env(id string) herald.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.envs[id]
}

// orderOf returns the delivered ids among ids, in delivery order.
func (r *recorder) orderOf(ids ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range r.order {
		if contains(ids, id) {
			out = append(out, id)
		}
	}
	return out
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

var errBroker = errors.New("broker said no to nats://relay:hunter2@broker.internal:4222")

func contains(s []string, v string) bool {
	for _, x := range s {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}

// testLogger sends the relay's warnings and errors to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
