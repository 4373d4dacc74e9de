package heraldpg_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// starvedClient is a pgx tracer that holds the client back, once, before
// the statement that records the first migration: the migration's
// transaction is then idle on the server for that long, as when a loaded
// machine or a throttled container leaves the process without CPU.
type starvedClient struct {
	once  sync.Once
	pause time.Duration
}

func (s *starvedClient) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "(version, name) VALUES") {
		s.once.Do(func() { time.Sleep(s.pause) })
	}
	return ctx
}

func (*starvedClient) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The relay's transactions end after a second idle on the server, but a
// migration is many round trips: a client starved for longer than that
// between two of them still migrates (it failed with "terminating
// connection due to idle-in-transaction timeout" on a loaded machine).
func TestMigrationSurvivesAClientStarvedBetweenStatements(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	starved := &starvedClient{pause: 2 * time.Second}
	cfg.ConnConfig.Tracer = starved
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	d, err := heraldpg.New(pool, &heraldpg.Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(t.Context()))
	var rows int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM `+d.Table()).Scan(&rows), "the table is there")
}
