package heraldpg

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldbackfill"
	"github.com/herald-outbox/herald/internal/testenv"
)

// These tests set the package's backfill hooks, so none runs in parallel
// with another that backfills.

// orderCase is an outbox and a one-row table items(id 1, version 1), a
// writer, and a backfill of the table in the background.
type orderCase struct {
	pool   *pgxpool.Pool
	d      *Driver
	w      *herald.Writer[pgx.Tx]
	schema string
}

func setupOrder(t *testing.T) *orderCase {
	t.Helper()
	pool := testenv.PostgresPool(t)
	cfg := &Config{Schema: testenv.Schema(t)}
	d, err := New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(t.Context()))
	w, err := NewWriter(cfg)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE %q.items (id int PRIMARY KEY, version int NOT NULL);
		INSERT INTO %q.items VALUES (1, 1)`, cfg.Schema, cfg.Schema))
	require.NoError(t, err)
	t.Cleanup(func() { backfillHooks.waiting, backfillHooks.locked, backfillHooks.leased = nil, nil, nil })
	return &orderCase{pool: pool, d: d, w: w, schema: cfg.Schema}
}

// backfill runs the backfill in the background; the channel gets its
// error once it is done.
func (c *orderCase) backfill(t *testing.T) <-chan error {
	b, err := heraldbackfill.New(c.d, &heraldbackfill.Config{Name: "order", Topic: "items",
		Source:  heraldbackfill.Source{Table: c.schema + ".items", KeyColumns: []string{"id"}, Payload: `jsonb_build_object('version', version)`},
		Logger:  nil,
		Restart: false})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(context.Background())
		done <- err
	}()
	return done
}

// liveEvent writes the live event of version v in tx.
func (c *orderCase) liveEvent(t *testing.T, tx pgx.Tx, v int) {
	require.NoError(t, c.w.WriteTx(t.Context(), tx, herald.Message{Topic: "items", Key: "1",
		Payload: fmt.Appendf(nil, `{"version": %d}`, v)}))
}

func (c *orderCase) update(ctx context.Context, tx pgx.Tx, v int) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %q.items SET version = $1 WHERE id = 1`, c.schema), v)
	return err
}

// waitForLockWait waits until a session of the test's schema waits for a
// row lock, its statement containing what.
func (c *orderCase) waitForLockWait(t *testing.T, what string) {
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, c.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND query LIKE '%' || $2 || '%'`,
			c.schema, what).Scan(&n))
		return n > 0
	}, 20*time.Second, time.Millisecond)
}

// requireInOrder checks key 1's events in seq order, the relay's: no
// backfilled event after a live one of a newer version, and the last
// event carries the row's version now.
func (c *orderCase) requireInOrder(t *testing.T) {
	rows, err := c.pool.Query(t.Context(), fmt.Sprintf(`SELECT payload, headers ? 'Herald-Backfill' FROM %q.herald_outbox
		WHERE key = '1' ORDER BY seq`, c.schema))
	require.NoError(t, err)
	defer rows.Close()
	var (
		maxLive, last, backfilled int
		order                     []string
	)
	for rows.Next() {
		var (
			p      []byte
			marked bool
			v      struct{ Version int }
		)
		require.NoError(t, rows.Scan(&p, &marked))
		require.NoError(t, json.Unmarshal(p, &v))
		order = append(order, fmt.Sprintf("%v:v%d", map[bool]string{true: "backfill", false: "live"}[marked], v.Version))
		if marked {
			backfilled++
			require.GreaterOrEqual(t, v.Version, maxLive, "a backfilled state older than a live event before it: %v", order)
		} else {
			maxLive = max(maxLive, v.Version)
		}
		last = v.Version
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1, backfilled, "%v", order)
	var now int
	require.NoError(t, c.pool.QueryRow(t.Context(), fmt.Sprintf(`SELECT version FROM %q.items WHERE id = 1`, c.schema)).Scan(&now))
	require.Equal(t, now, last, "the key's last event is the row's state: %v", order)
}

// A live transaction that writes its event (taking its seq) before it
// changes the row: the batch, which drew its seq values after, waits for
// it before reading, so it reads the new state. Without that wait the
// batch would lock and read the old state, the live UPDATE would wait for
// its commit, and the old state would be published after the new one.
func TestBackfillWaitsForALiveEventWrittenBeforeItsRowChange(t *testing.T) {
	c := setupOrder(t)
	ctx := t.Context()
	reached := make(chan string, 2)
	backfillHooks.waiting = func() { reached <- "waiting" }
	backfillHooks.locked = func() { reached <- "locked" }

	live, err := c.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = live.Rollback(ctx) }()
	c.liveEvent(t, live, 2)
	done := c.backfill(t)
	// Waiting (as it must) or, were it not to wait, having locked and
	// read the row: either way the live change comes now.
	<-reached
	require.NoError(t, c.update(ctx, live, 2))
	require.NoError(t, live.Commit(ctx))
	require.NoError(t, <-done)
	c.requireInOrder(t)
}

// A live transaction that changed the row first: the batch's FOR SHARE
// read waits for its commit and reads its state.
func TestBackfillReadsTheStateOfALiveChangeItWaitedFor(t *testing.T) {
	c := setupOrder(t)
	ctx := t.Context()
	live, err := c.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = live.Rollback(ctx) }()
	require.NoError(t, c.update(ctx, live, 2))
	done := c.backfill(t)
	c.waitForLockWait(t, "FOR SHARE")
	c.liveEvent(t, live, 2)
	require.NoError(t, live.Commit(ctx))
	require.NoError(t, <-done)
	c.requireInOrder(t)
}

// A live change after the batch locked the row waits for the batch's
// commit: its event comes after the backfilled one.
func TestBackfillMakesALaterLiveChangeWaitAndComeAfter(t *testing.T) {
	c := setupOrder(t)
	ctx := t.Context()
	locked, release := make(chan struct{}), make(chan struct{})
	backfillHooks.locked = func() { close(locked); <-release }
	done := c.backfill(t)
	<-locked
	liveDone := make(chan error, 1)
	go func() {
		liveDone <- pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			if err := c.update(ctx, tx, 2); err != nil {
				return err
			}
			return c.w.WriteTx(ctx, tx, herald.Message{Topic: "items", Key: "1", Payload: []byte(`{"version": 2}`)})
		})
	}()
	c.waitForLockWait(t, "UPDATE")
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, <-liveDone)
	c.requireInOrder(t)
}

// A relay's claim that leases the key's live events on both sides of the
// seq the batch drew (it drew first, then waited for the live transaction
// that wrote the newer one): the batch rolls back and writes its event
// again with a new seq. Committed inside the lease's range, its event
// would keep the key leased after the claim's acknowledgement, until the
// lease expired; here the next claim takes it.
func TestBackfillWaitsForALeaseOverItsSeq(t *testing.T) {
	c := setupOrder(t)
	ctx := t.Context()
	// Version 2 and its event, committed before the batch draws its seq.
	require.NoError(t, pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := c.update(ctx, tx, 2); err != nil {
			return err
		}
		return c.w.WriteTx(ctx, tx, herald.Message{Topic: "items", Key: "1", Payload: []byte(`{"version": 2}`)})
	}))
	reached, release := make(chan string, 2), make(chan struct{})
	leased := make(chan struct{}, 1)
	backfillHooks.waiting = func() { reached <- "waiting" }
	backfillHooks.locked = func() { reached <- "locked"; <-release }
	backfillHooks.leased = func() {
		select {
		case leased <- struct{}{}:
		default:
		}
	}

	// A live transaction holds the outbox as the batch draws its seq.
	live, err := c.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = live.Rollback(ctx) }()
	require.NoError(t, c.w.WriteTx(ctx, live, herald.Message{Topic: "items", Key: "other", Payload: []byte(`{"version": 0}`)}))
	done := c.backfill(t)
	require.Equal(t, "waiting", <-reached)
	// Version 3: its event's seq is drawn after the batch's.
	require.NoError(t, c.update(ctx, live, 3))
	c.liveEvent(t, live, 3)
	require.NoError(t, live.Commit(ctx))
	require.Equal(t, "locked", <-reached)

	// The claim leases key 1 (two events) over the batch's seq.
	token := uuid.NewString()
	batch, err := c.d.Claim(ctx, herald.ClaimParams{Token: token, Owner: "lease-test", Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, batch, 3)
	close(release)
	// The batch finds the lease over its event, rolls back, and commits
	// with a new seq, above the lease's range.
	require.NoError(t, <-done)
	select {
	case <-leased:
	default:
		t.Fatal("the batch did not find the lease over its event")
	}
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = e.ID
	}
	_, err = c.d.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
	require.NoError(t, err)

	next, err := c.d.Claim(ctx, herald.ClaimParams{Token: uuid.NewString(), Owner: "lease-test", Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, next, 1, "the backfilled event is claimed, not kept behind a lease whose own events are published")
	require.Equal(t, "1", next[0].Key)
	require.Equal(t, "order", next[0].Headers[herald.HeaderBackfill])
	c.requireInOrder(t)
}
