package testenv_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	// Checked here rather than with goleak.VerifyTestMain so that it also
	// covers what StopPostgres leaves behind.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DSNAnswersQueries", func(t *testing.T) {
		t.Parallel()
		conn, err := pgx.Connect(ctx, testenv.PostgresDSN(t))
		require.NoError(t, err)
		defer conn.Close(ctx)
		var one int
		require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
		require.Equal(t, 1, one)
	})

	t.Run("EveryTestGetsTheSameServer", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, testenv.PostgresDSN(t), testenv.PostgresDSN(t))
	})

	t.Run("SchemaHoldsTablesUnderAPlainName", func(t *testing.T) {
		t.Parallel()
		pool := testenv.PostgresPool(t)
		a, b := testenv.Schema(t), testenv.Schema(t)
		require.Regexp(t, regexp.MustCompile(`^ht_[a-z0-9_]+$`), a)
		require.NotEqual(t, a, b)

		_, err := pool.Exec(ctx, "CREATE TABLE "+a+".t (id int PRIMARY KEY)")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+a+".t VALUES (1)")
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+a+".t").Scan(&n))
		require.Equal(t, 1, n)
	})

	t.Run("SchemaIsDroppedWithItsTablesWhenTheTestEnds", func(t *testing.T) {
		t.Parallel()
		var name string
		t.Run("Inner", func(t *testing.T) {
			name = testenv.Schema(t)
			_, err := testenv.PostgresPool(t).Exec(ctx, "CREATE TABLE "+name+".t (id int)")
			require.NoError(t, err)
		})
		var exists bool
		require.NoError(t, testenv.PostgresPool(t).QueryRow(ctx,
			"SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", name).Scan(&exists))
		require.False(t, exists)
	})
}

func TestNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("StreamSurvivesRestart", func(t *testing.T) {
		t.Parallel()
		srv := testenv.NATS(t)
		stream := srv.CreateStream(t, "ORDERS", "orders.>")
		js, err := jetstream.New(srv.Conn(t))
		require.NoError(t, err)
		url := srv.URL()

		_, err = js.Publish(ctx, "orders.created", []byte("1"), jetstream.WithMsgID("a"))
		require.NoError(t, err)

		srv.Stop()
		srv.Stop()
		shortCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = js.Publish(shortCtx, "orders.created", []byte("2"), jetstream.WithMsgID("b"))
		cancel()
		require.Error(t, err)

		srv.Restart(t)
		require.Equal(t, url, srv.URL())
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := js.Publish(ctx, "orders.created", []byte("2"), jetstream.WithMsgID("b"))
			return err == nil
		}, 10*time.Second, 50*time.Millisecond)

		// The duplicate window survived the restart too.
		ack, err := js.Publish(ctx, "orders.created", []byte("1"), jetstream.WithMsgID("a"))
		require.NoError(t, err)
		require.True(t, ack.Duplicate)

		info, err := stream.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(2), info.State.Msgs)
		require.Equal(t, jetstream.FileStorage, info.Config.Storage)
		require.Equal(t, 2*time.Minute, info.Config.Duplicates)
	})

	t.Run("RestartOfARunningServerKeepsStreams", func(t *testing.T) {
		t.Parallel()
		srv := testenv.NATS(t)
		srv.CreateStream(t, "EVENTS", "events.>")
		srv.Restart(t)
		js, err := jetstream.New(srv.Conn(t))
		require.NoError(t, err)
		_, err = js.Stream(ctx, "EVENTS")
		require.NoError(t, err)
	})
}
