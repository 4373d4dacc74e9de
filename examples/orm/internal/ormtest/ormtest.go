// Package ormtest is the plumbing the ORM examples share, kept out of them
// so that each shows only its library's code: a PostgreSQL schema of the
// test's own, and the outbox rows read back with plain SQL.
package ormtest

import (
	"database/sql"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// PostgresDSN creates a schema for the test (testenv.Schema: dropped
// when the test ends) and returns it with a DSN whose search_path is that
// schema, so that an ORM's unqualified table names land in it. Like
// heraldtest, it skips the test without PostgreSQL, and fails it with
// CI=true.
func PostgresDSN(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn, schema = testenv.PostgresDSN(t), testenv.Schema(t)
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " search_path=" + schema, schema // the keyword/value form
	}
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// Event is what the examples check of an outbox row.
type Event struct {
	Topic, Type, AggregateID, Payload string
}

// Events reads every row of the outbox table, in the order written.
func Events(t testing.TB, db *sql.DB, table string) []Event {
	t.Helper()
	rows, err := db.QueryContext(t.Context(),
		`SELECT topic, type, aggregate_id, payload FROM `+table+` ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		require.NoError(t, rows.Scan(&e.Topic, &e.Type, &e.AggregateID, &e.Payload))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}
