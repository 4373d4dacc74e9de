package heraldmysql_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	heraldpkg "github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
)

// herald returns a message on topic.
func herald(topic string) heraldpkg.Message {
	return heraldpkg.Message{Topic: topic, Payload: []byte("x")}
}

// The relay's reads are index range scans of one state, however many rows
// of other states the table holds: MySQL has no partial indexes, so each
// index is led by the state. Checked with EXPLAIN on a table of ready,
// published and claimed rows.
func TestClaimStatementsAreIndexRangeScans(t *testing.T) {
	t.Parallel()
	o := setup(t, heraldmysql.Config{})
	ctx := t.Context()
	var msgs []heraldpkg.Message
	for i := range 2000 {
		m := herald("t")
		m.Key = fmt.Sprintf("k%04d", i%200)
		msgs = append(msgs, m)
	}
	o.kit.Write(msgs...)
	after := herald("u") // the topic after t's 200 keys
	after.Key = "z"
	o.kit.Write(after)
	_, err := o.DB.ExecContext(ctx, `UPDATE `+o.Store.Table()+` SET state = 'published', published_at = UTC_TIMESTAMP(6) WHERE seq % 2 = 0`)
	require.NoError(t, err)
	_, envs := o.kit.Claim(10, time.Minute)
	require.Len(t, envs, 10)
	_, err = o.DB.ExecContext(ctx, `ANALYZE TABLE `+o.Store.Table())
	require.NoError(t, err)

	// EXPLAIN shows the next-key probe's derived table as a ref on the
	// state alone; what it reads is one index entry from the cursor on,
	// counted by the server's handler counters.
	conn, err := o.DB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	reads := func() (n int64) {
		rows, err := conn.QueryContext(ctx, `SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_key', 'Handler_read_rnd_next')`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var (
				name string
				v    int64
			)
			require.NoError(t, rows.Scan(&name, &v))
			n += v
		}
		require.NoError(t, rows.Err())
		return n
	}
	probe := o.Store.Plans()["next key"]
	probe.Args = []any{"t", "t", "k0150"}
	before := reads()
	var (
		topic, key     string
		blocked, ready bool
	)
	require.NoError(t, conn.QueryRowContext(ctx, probe.SQL, probe.Args...).Scan(&topic, &key, &blocked, &ready))
	require.Equal(t, "k0152", key, "k0151 has published rows only")
	require.Less(t, reads()-before-3, int64(20), "the probe read more than a few index entries: it scanned the keys before the cursor")

	// A paused topic is passed in one probe, and the topics with ready
	// events are found one probe each: neither reads t's 200 keys.
	before = reads()
	past := o.Store.Plans()["past a topic"]
	require.NoError(t, conn.QueryRowContext(ctx, past.SQL, past.Args...).Scan(&topic, &key, &blocked, &ready))
	require.Equal(t, []string{"u", "z"}, []string{topic, key})
	require.Less(t, reads()-before-3, int64(20), "the probe past a topic read its keys")
	for _, from := range []string{"", "t"} {
		before = reads()
		next := o.Store.Plans()["next topic"]
		require.NoError(t, conn.QueryRowContext(ctx, next.SQL, from).Scan(&topic))
		require.Equal(t, map[string]string{"": "t", "t": "u"}[from], topic)
		require.Less(t, reads()-before-3, int64(20), "the topic probe from %q read more than a few index entries", from)
	}

	for name, p := range o.Store.Plans() {
		rows := explain(t, o.DB, p.SQL, p.Args)
		for _, r := range rows {
			if strings.HasPrefix(r["table"], "<derived") {
				continue // the next key's one row, read by the rows below
			}
			require.Contains(t, []string{"range", "ref", "eq_ref"}, r["type"], "%s: %v", name, r)
			require.NotEmpty(t, r["key"], "%s: %v", name, r)
			if name == "unordered claim" || name == "key run" || name == "retention" {
				require.NotContains(t, r["Extra"], "filesort", "%s reads in index order: %v", name, r)
			}
		}
	}
}

// explain returns EXPLAIN's rows as column maps.
func explain(t *testing.T, db *sql.DB, query string, args []any) []map[string]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		m := map[string]string{}
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	require.NoError(t, rows.Err())
	return out
}
