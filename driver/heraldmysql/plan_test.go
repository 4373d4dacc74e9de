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

	// The walk reads one index entry per key it returns (a loose scan of
	// the key index), and a few more per key for what it decides by,
	// counted by the server's handler counters: never the keys before the
	// cursor, nor every event of a key.
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
	walk := func(name string, want []string) {
		t.Helper()
		p := o.Store.Plans()[name]
		before := reads()
		rows, err := conn.QueryContext(ctx, p.SQL, p.Args...)
		require.NoError(t, err)
		var got []string
		for rows.Next() {
			var (
				topic, key     string
				blocked, ready bool
				n              int
			)
			require.NoError(t, rows.Scan(&topic, &key, &blocked, &ready, &n))
			got = append(got, topic+"/"+key)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		read := reads() - before
		require.Equal(t, want, got, "%s", name)
		// Per key: the loose scan's dive, the two flags' probes, the head,
		// and the count's probe and the events it counts, at most 10 a key
		// here (its bound per key).
		require.Less(t, read, int64(40*len(want)+20), "%s read %d index entries for %d keys: it scanned what it passes", name, read, len(want))
	}
	// From k0150 in t: k0152, k0154, ... (the odd keys have published
	// rows only), then u's key: never the keys before the cursor.
	var want []string
	for i := 152; i < 200; i += 2 {
		want = append(want, fmt.Sprintf("t/k%04d", i))
	}
	walk("walk keys", append(want, "u/z"))
	// A paused topic is left out of the range: t's 200 keys are not read.
	walk("walk past topic", []string{"u/z"})

	for name, p := range o.Store.Plans() {
		rows := explain(t, o.DB, p.SQL, p.Args)
		for _, r := range rows {
			if strings.HasPrefix(r["table"], "<derived") || strings.HasPrefix(r["table"], "<union") ||
				strings.Contains(r["Extra"], "Table function: json_table") {
				continue // the walk's keys, read by the rows below; a union's result; a list of keys given
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
