package heraldpg

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The readers serve tests: past their limit (10,000 rows; 2 here, so that
// the test stays quick) they fail and say how to narrow the read, rather
// than load a large table whole or return part of it.
func TestReadEventsRefusesMoreRowsThanItsLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	d, err := New(pool, &Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))
	_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload) VALUES ('big', ''), ('big', ''), ('big', ''), ('small', '')`)
	require.NoError(t, err)
	query := d.names.render(eventsSQL)

	_, err = readEvents(ctx, d.db, query, nil, 2)
	require.EqualError(t, err, "heraldpg: more than 2 events in the outbox: name the topics to read")
	_, err = readEvents(ctx, d.db, query, []string{"big"}, 2)
	require.EqualError(t, err, `heraldpg: more than 2 events on topics ["big"]`)
	rows, err := readEvents(ctx, d.db, query, []string{"big"}, 3)
	require.NoError(t, err, "exactly the limit is not too many")
	require.Len(t, rows, 3)
}
