package heraldpubsub_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
)

// With a relay: the service refuses the first request of every ordering
// key. The client pauses each key; Publish resumes it, so the relay's
// retries get every event out, each key in commit order, none dead, and
// nothing of a key stored before the event refused ahead of it.
func TestRelayGetsEveryKeyOutAfterItsFirstRequestFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const keys, perKey = 10, 20
	var (
		mu      sync.Mutex
		refused = map[string]bool{}
	)
	f := newFake(t, func(req *pb.PublishRequest) error {
		key := req.Messages[0].OrderingKey
		mu.Lock()
		defer mu.Unlock()
		if key != "" && !refused[key] {
			refused[key] = true
			return status.Error(codes.Unavailable, "the backend went away")
		}
		return nil
	})
	f.topic(t, "orders")

	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	var msgs []herald.Message
	for i := range keys * perKey {
		msgs = append(msgs, herald.Message{Topic: "orders", Key: fmt.Sprintf("k%d", i%keys), Payload: fmt.Appendf(nil, "%d", i)})
	}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, w.WriteTx(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())

	logger := slog.New(slog.DiscardHandler)
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Publisher: f.publisher(t, &heraldpubsub.Config{Logger: logger}), Logger: logger, BatchSize: 50,
		PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond, OutageBackoffCap: 20 * time.Millisecond,
		Retry: herald.RetryPolicy{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 2, MaxAge: time.Hour},
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { _ = relay.Stop(context.Background()) })

	var st heraldadmin.Status
	require.Eventually(t, func() bool {
		st, err = store.Status(ctx)
		return err == nil && len(st.Topics) == 1 && st.Topics[0].State == heraldadmin.StatePublished
	}, 30*time.Second, 5*time.Millisecond, "every event published, none dead (a refusal for load costs no attempt)")
	require.EqualValues(t, keys*perKey, st.Topics[0].Count)

	mu.Lock()
	require.Len(t, refused, keys, "every key's first request was refused")
	mu.Unlock()
	byKey := map[string][]string{}
	for _, m := range f.stored("orders") {
		byKey[m.OrderingKey] = append(byKey[m.OrderingKey], string(m.Data))
	}
	for k := range keys {
		var want []string
		for i := k; i < keys*perKey; i += keys {
			want = append(want, fmt.Sprint(i))
		}
		require.Equalf(t, want, byKey[fmt.Sprint("k", k)], "key k%d: each event once, in commit order", k)
	}
}
