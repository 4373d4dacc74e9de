package heraldpg

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The admin page reads the retrying events every few seconds: through the
// ready rows' partial indexes, never the published ones.
func TestRetryingReadsUseTheReadyIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	d, err := New(pool, &Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))
	_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload, state, published_at)
		SELECT 'done', '\x00', 'published', now() FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload, attempts, last_error, available_at)
		SELECT 'failing', '\x00', 1, 'HTTP 500', now() + interval '1 hour' FROM generate_series(1, 50)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE `+d.Table())
	require.NoError(t, err)

	explain := func(sql string, args ...any) string {
		t.Helper()
		rows, err := pool.Query(ctx, `EXPLAIN `+sql, args...)
		require.NoError(t, err)
		defer rows.Close()
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		return strings.Join(plan, "\n")
	}
	text := explain(d.names.render(retryGroupsSQL), 100)
	require.NotContains(t, text, "Seq Scan", text)
	require.Regexp(t, `herald_outbox_(ready|key)_idx`, text)
	where, args, _, err := sqlstore.RetryingQuery(heraldadmin.RetryFilter{LastError: "HTTP 500"}, pgDialect, "now()")
	require.NoError(t, err)
	text = explain(`SELECT `+eventColumns+` FROM `+d.q.table+` WHERE `+where+` ORDER BY available_at, seq LIMIT 100`, args...)
	require.NotContains(t, text, "Seq Scan", text)
	require.Contains(t, text, "herald_outbox_ready_idx", text)
	text = explain(`UPDATE `+d.q.table+` SET available_at = now() WHERE `+where+` AND available_at > now()`, args...)
	require.NotContains(t, text, "Seq Scan", text)
	require.Regexp(t, `herald_outbox_(ready|key)_idx`, text)
}
