package heraldinbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/heraldinbox"
	"github.com/herald-outbox/herald/internal/testenv"
)

// countingGets counts the objects a store handed out.
type countingGets struct {
	*heraldclaim.MemoryStore
	gets atomic.Int64
}

func (s *countingGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.gets.Add(1)
	return s.MemoryStore.Get(ctx, key)
}

// claimed publishes one event of payload through a claim-check wrapper
// into store and returns it as a consumer receives it.
func claimed(t *testing.T, store heraldclaim.ObjectStore, payload []byte) herald.Message {
	t.Helper()
	var sent herald.Message
	p, err := heraldclaim.Wrap(herald.PublisherFunc(func(_ context.Context, b []herald.Envelope) error {
		sent = b[0].Message
		return nil
	}), store, &heraldclaim.Options{Threshold: 16})
	require.NoError(t, err)
	env := herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "t", Payload: payload}}
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))
	require.Contains(t, sent.Headers, heraldclaim.HeaderKey)
	return sent
}

func TestProcessClaimResolvesOnceAndChecksTheDigest(t *testing.T) {
	for name, process := range map[string]func(t *testing.T) func(store heraldclaim.ObjectStore, m herald.Message, got *[]byte) (bool, error){
		"SQLite":            claimSQL,
		"PostgreSQLOverPgx": claimPgx,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run := process(t)
			store := &countingGets{MemoryStore: heraldclaim.NewMemoryStore("b")}
			payload := bytes.Repeat([]byte("payload "), 100)
			m := claimed(t, store, payload)

			// The object was replaced: the handler does not run, nothing is
			// recorded.
			key := m.Headers[heraldclaim.HeaderKey]
			require.NoError(t, store.Put(t.Context(), key, bytes.ToUpper(payload), ""))
			var got []byte
			processed, err := run(store, m, &got)
			require.ErrorIs(t, err, heraldclaim.ErrMismatch)
			require.False(t, processed)
			require.Nil(t, got)

			require.NoError(t, store.Put(t.Context(), key, payload, ""))
			processed, err = run(store, m, &got)
			require.NoError(t, err)
			require.True(t, processed)
			require.Equal(t, payload, got)
			require.Equal(t, int64(2), store.gets.Load())

			got = nil
			processed, err = run(store, m, &got)
			require.NoError(t, err)
			require.False(t, processed, "a duplicate")
			require.Nil(t, got)
			require.Equal(t, int64(2), store.gets.Load(), "a duplicate fetches nothing")

			plain := herald.Message{ID: herald.NewID(), Payload: []byte("small")}
			processed, err = run(nil, plain, &got)
			require.NoError(t, err)
			require.True(t, processed)
			require.Equal(t, []byte("small"), got)

			_, err = run(nil, claimed(t, store, payload), &got)
			require.ErrorContains(t, err, "no object store")
		})
	}
}

func claimSQL(t *testing.T) func(store heraldclaim.ObjectStore, m herald.Message, got *[]byte) (bool, error) {
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "consumer.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ib, err := heraldinbox.NewSQLite(nil)
	require.NoError(t, err)
	require.NoError(t, ib.MigrateSQL(t.Context(), db))
	return func(store heraldclaim.ObjectStore, m herald.Message, got *[]byte) (bool, error) {
		return ib.ProcessClaimSQL(t.Context(), db, "c", store, m, func(_ context.Context, _ *sql.Tx, m herald.Message) error {
			*got = m.Payload
			return nil
		})
	}
}

func claimPgx(t *testing.T) func(store heraldclaim.ObjectStore, m herald.Message, got *[]byte) (bool, error) {
	pool := testenv.PostgresPool(t)
	ib, err := heraldinbox.NewPostgres(&heraldinbox.Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, ib.MigratePgx(t.Context(), pool))
	return func(store heraldclaim.ObjectStore, m herald.Message, got *[]byte) (bool, error) {
		return ib.ProcessClaimPgx(t.Context(), pool, "c", store, m, func(_ context.Context, _ pgx.Tx, m herald.Message) error {
			*got = m.Payload
			return nil
		})
	}
}
