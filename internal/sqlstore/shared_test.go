package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

func TestNewNames(t *testing.T) {
	t.Parallel()
	n, err := sqlstore.NewNames("heraldpg", "app", "outbox")
	require.NoError(t, err)
	require.Equal(t, `"app"."outbox"`, n.Qualified)
	require.Equal(t, `"app"."outbox_migrations"`, n.Migrations)
	require.Equal(t, `SELECT 1 FROM "app"."outbox" -- outbox now`, n.Render(`SELECT 1 FROM {{.Table}} -- {{.Name}} {{.Now}}`, "{{.Now}}", "now"))

	n, err = sqlstore.NewNames("heraldsqlite", "", "outbox")
	require.NoError(t, err)
	require.Equal(t, `"outbox"`, n.Qualified)

	for _, tc := range []struct{ schema, table, field string }{
		{"App", "outbox", "Config.Schema"},
		{"app", `out"box`, "Config.Table"},
		{"app", "", "Config.Table"},
	} {
		_, err := sqlstore.NewNames("heraldpg", tc.schema, tc.table)
		require.ErrorContains(t, err, "heraldpg: "+tc.field)
	}
}

func TestNewWritesLaysOutDecidedOutcomes(t *testing.T) {
	t.Parallel()
	w := sqlstore.NewWrites(herald.CompleteParams{Published: []string{"p"}, Failed: []herald.Failure{
		{ID: "r", Outcome: herald.OutcomeRetry, Error: "nack", Delay: 2 * time.Second},
		{ID: "h", Outcome: herald.OutcomeHeldBack, Error: "held"},
		{ID: "x", Outcome: herald.OutcomeParked, Error: "poison"},
	}})
	require.Equal(t, []string{"p", "r", "h", "x"}, w.IDs)
	require.Equal(t, []bool{true, false, false, false}, w.Published)
	require.Equal(t, []bool{false, false, false, true}, w.Dead)
	require.Equal(t, []bool{false, false, false, true}, w.Park)
	require.Equal(t, []bool{false, false, true, false}, w.Refund)
	require.Equal(t, []int64{0, 2_000_000, 0, 0}, w.DelayUS)
	require.Nil(t, w.Error[0])
	require.Equal(t, "nack", *w.Error[1])
	require.Nil(t, w.Error[2], "a held-back event keeps its last error")
	require.Equal(t, []any{"x", false, true, true, false, int64(0), "poison"}, w.Rows()[3][:])
}

func TestApplyMigrations(t *testing.T) {
	t.Parallel()
	ms := []sqlstore.Migration{{Version: 1, Name: "001_a.sql", SQL: "A"}, {Version: 2, Name: "002_b.sql", SQL: "B"}}
	var ran []any
	exec := func(_ context.Context, sql string, args ...any) error {
		ran = append(ran, sql)
		ran = append(ran, args...)
		return nil
	}
	render := func(s string) string { return s + "!" }
	require.NoError(t, sqlstore.ApplyMigrations(t.Context(), "t", ms, 1, render, "REC", exec))
	require.Equal(t, []any{"B!", "REC", 2, "002_b.sql"}, ran, "only what is above the current version, then its record")

	err := sqlstore.ApplyMigrations(t.Context(), "t", ms, 3, render, "REC", exec)
	require.Error(t, err, "a table newer than the driver is refused")

	boom := errors.New("boom")
	err = sqlstore.ApplyMigrations(t.Context(), "t", ms, 0, render, "REC",
		func(context.Context, string, ...any) error { return boom })
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "001_a.sql")
}

func TestClaimDispatchesAndSortsBySeq(t *testing.T) {
	t.Parallel()
	var gotPerKey int
	c := sqlstore.Claimers{
		Unordered: func(context.Context, herald.ClaimParams) ([]sqlstore.ClaimedRow, error) {
			return rows(3, 1), nil
		},
		Ordered: func(_ context.Context, _ herald.ClaimParams, perKey int) ([]sqlstore.ClaimedRow, error) {
			gotPerKey = perKey
			return rows(9, 2), nil
		},
	}
	envs, err := sqlstore.Claim(t.Context(), "drv", herald.ClaimParams{Limit: 10, Unordered: true}, c)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3}, []int64{envs[0].Seq, envs[1].Seq})
	envs, err = sqlstore.Claim(t.Context(), "drv", herald.ClaimParams{Limit: 10, PerKey: 50}, c)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 9}, []int64{envs[0].Seq, envs[1].Seq})
	require.Equal(t, 10, gotPerKey, "PerKey above Limit means Limit")
	_, err = sqlstore.Claim(t.Context(), "drv", herald.ClaimParams{Limit: -1}, c)
	require.ErrorContains(t, err, "drv: claiming: negative limit")
	envs, err = sqlstore.Claim(t.Context(), "drv", herald.ClaimParams{Limit: 0}, c)
	require.NoError(t, err)
	require.Empty(t, envs)
}

func rows(seqs ...int64) []sqlstore.ClaimedRow {
	out := make([]sqlstore.ClaimedRow, len(seqs))
	for i, s := range seqs {
		out[i].Seq = s
	}
	return out
}

// row is a claimed row: id, topic and key, unreadable when why is set.
func row(seq int64, topic, key, why string) sqlstore.ClaimedRow {
	r := sqlstore.ClaimedRow{Unreadable: why}
	r.ID, r.Seq, r.Topic, r.Key = fmt.Sprint(seq), seq, topic, key
	return r
}

// A row the claim could not read reaches the relay in its place in the
// batch, marked, so that the relay refuses it (dead, its key parked, the
// key's later events held back) and counts and logs it as every dead event;
// the relay's side is TestRelayCountsAndLogsAnUnreadableRowAsDead.
func TestClaimMarksUnreadableRowsForTheRelay(t *testing.T) {
	t.Parallel()
	readable := row(1, "t", "b", "")
	readable.Headers = map[string]string{"h": "v"}
	late := row(3, "t", "c", "created_at is infinity")
	late.Headers = map[string]string{"h": "v"}
	c := sqlstore.Claimers{
		Ordered: func(context.Context, herald.ClaimParams, int) ([]sqlstore.ClaimedRow, error) {
			return []sqlstore.ClaimedRow{late, row(2, "t", "a", `header "n" is a number`), readable}, nil
		},
	}
	envs, err := sqlstore.Claim(t.Context(), "drv", herald.ClaimParams{Token: "tok", Limit: 10}, c)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3"}, ids(envs), "every row, in seq order")
	require.Equal(t, map[string]string{"h": "v"}, envs[0].Headers, "a readable row is as read")
	require.Equal(t, map[string]string{`herald: unreadable row: header "n" is a number`: ""}, envs[1].Headers)
	require.Equal(t, map[string]string{"h": "v", "herald: unreadable row: created_at is infinity": ""}, envs[2].Headers)
}

func ids(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}
