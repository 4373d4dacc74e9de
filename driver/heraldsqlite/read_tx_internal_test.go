package heraldsqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The readers serve tests: past their limit (10,000 rows; 2 here, so that
// the test stays quick) they fail and say how to narrow the read, rather
// than load a large table whole or return part of it.
func TestReadEventsRefusesMoreRowsThanItsLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	defer db.Close()
	d, err := New(db, nil)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))
	_, err = db.ExecContext(ctx, `INSERT INTO herald_outbox (topic, payload) VALUES ('big', x''), ('big', x''), ('big', x''), ('small', x'')`)
	require.NoError(t, err)
	query := d.names.render(eventsSQL)

	_, err = readEvents(ctx, db, query, nil, 2)
	require.EqualError(t, err, "heraldsqlite: more than 2 events in the outbox: name the topics to read")
	_, err = readEvents(ctx, db, query, []string{"big"}, 2)
	require.EqualError(t, err, `heraldsqlite: more than 2 events on topics ["big"]`)
	rows, err := readEvents(ctx, db, query, []string{"big"}, 3)
	require.NoError(t, err, "exactly the limit is not too many")
	require.Len(t, rows, 3)
}
