package heraldsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// planStatement is one of the relay's statements with arguments for
// EXPLAIN QUERY PLAN, and what its plan may do besides probing an index:
// scan names the one index it may read whole, the blocked index (rows
// claimed or parked: the rows in flight, and dead letters awaiting an
// operator), and counts marks the statements that count ready rows by
// design (the backlog), which may read any index whole but never the
// table.
type planStatement struct {
	name   string
	sql    string
	args   []any
	scan   string
	counts bool
}

// The relay's statements, claims, acknowledgements, rescue and retention,
// are index probes whatever the planner's statistics say: none, gathered
// on a large backlog with nothing claimed, or gathered with thousands of
// rows claimed. The outbox table is never read whole, and rows are found
// by their id or seq, never by a scan with a lookup in the batch per row:
// after ANALYZE with nothing claimed, the acknowledgement with failures
// was planned as a scan of the blocked index with the batch's JSON read
// again for each claimed row (see completeSQL).
//
// Statistics gathered while the table was far smaller than it is now are
// not covered: SQLite then plans most of these statements as scans of the
// table (README, "SQLite").
func TestRelayStatementsAreIndexProbesWhateverTheStatistics(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1) // statistics are loaded per connection
	d, err := New(db, nil)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))

	exec := func(query string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, query, args...)
		require.NoError(t, err, query)
	}
	// 10,000 ready events on 1,000 keys and 10,000 published, some dead
	// and parking their key.
	exec(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
	INSERT INTO herald_outbox (topic, key, payload, state, published_at)
	SELECT 'orders', 'k' || (x % 1000), zeroblob(100),
	       CASE WHEN x % 2 = 0 THEN 'published' ELSE 'ready' END,
	       CASE WHEN x % 2 = 0 THEN x END
	FROM c`)
	exec(`UPDATE herald_outbox SET state = 'dead', dead_at = seq, parked = 1 WHERE seq % 997 = 0`)

	q := d.q
	const batch = `["00000000-0000-4000-8000-000000000001","00000000-0000-4000-8000-000000000002"]`
	statements := []planStatement{
		{name: "claim by age", sql: q.claim, args: []any{1000, "token", "relay", 1000, 1 << 30}},
		{name: "walk, next key", sql: q.nextKey, args: []any{"orders", "k1"}},
		{name: "walk, next topic", sql: q.nextTopic, args: []any{"orders"}},
		{name: "key blocked", sql: q.keyBlocked, args: []any{"orders", "k1"}},
		{name: "key's run", sql: q.keyRun, args: []any{"orders", "k1", 10}},
		{name: "key's available run", sql: q.keyAvailable, args: []any{"orders", "k1", 10}},
		{name: "blocked candidates", sql: q.blockedKeysOf, args: []any{`[["orders","k1",false],["orders","k2",true]]`}},
		{name: "candidates' runs", sql: q.runsOf, args: []any{`[["orders","k1",false],["orders","k2",true]]`, 10}},
		{name: "claim of seqs", sql: q.claimSeqs, args: []any{`[1,3,5]`, "token", "relay", 1000}},
		{name: "acknowledgement", sql: q.publish, args: []any{batch, "token"}},
		{name: "acknowledgement, delete", sql: q.publishDelete, args: []any{batch, "token"}},
		{name: "acknowledgement with failures", sql: q.complete,
			args: []any{`[["00000000-0000-4000-8000-000000000001",true,false,false,false,0,null],` +
				`["00000000-0000-4000-8000-000000000002",false,false,false,false,1000,"no"]]`, "token"}},
		{name: "release", sql: q.releaseClaim, args: []any{"token"}, scan: "herald_outbox_blocked_idx"},
		{name: "rescue", sql: q.rescue, args: []any{100}, scan: "herald_outbox_blocked_idx"},
		{name: "retention", sql: q.deletePublished, args: []any{1000, 100}},
		{name: "backlog", sql: q.backlog, counts: true},
	}
	check := func(stats string) {
		t.Helper()
		for _, s := range statements {
			requireIndexProbes(t, db, s, stats)
		}
	}

	check("no statistics")
	exec(`ANALYZE`)
	check("statistics of a backlog with nothing claimed")
	exec(`UPDATE herald_outbox SET state = 'claimed', claim_token = 't' || (seq % 4), lease_until = 1
		WHERE state = 'ready' AND seq % 5 = 1`)
	exec(`ANALYZE`)
	check("statistics with 2,000 rows claimed")
}

// requireIndexProbes fails when s's plan reads the outbox table whole, or
// an index of it whole other than the one s may scan (any, for a
// statement that counts), or finds the outbox's rows by anything but an
// index probe (SEARCH) besides that scan.
func requireIndexProbes(t *testing.T, db *sql.DB, s planStatement, stats string) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+s.sql, s.args...)
	require.NoError(t, err, s.name)
	defer rows.Close()
	var plan strings.Builder
	var outbox []string // the plan's lines that read the outbox
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		fmt.Fprintf(&plan, "%d %d %s\n", id, parent, detail)
		for _, alias := range []string{"herald_outbox", "o", "s", "b"} {
			if strings.HasPrefix(detail, "SCAN "+alias+" ") || detail == "SCAN "+alias ||
				strings.HasPrefix(detail, "SEARCH "+alias+" ") {
				outbox = append(outbox, detail)
			}
		}
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, outbox, "%s (%s): no step reads the outbox:\n%s", s.name, stats, plan.String())
	for _, step := range outbox {
		scan, ok := strings.CutPrefix(step, "SCAN ")
		if !ok {
			continue // SEARCH: an index probe
		}
		_, index, byIndex := strings.Cut(scan, " USING ")
		switch {
		case !byIndex:
			t.Errorf("%s (%s): the outbox table is read whole: %s\n%s", s.name, stats, step, plan.String())
		case s.counts:
		case s.scan == "" || !strings.HasSuffix(index, "INDEX "+s.scan):
			t.Errorf("%s (%s): an index of the outbox is read whole: %s\n%s", s.name, stats, step, plan.String())
		}
	}
}
