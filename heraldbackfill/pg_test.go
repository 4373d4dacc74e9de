package heraldbackfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldbackfill"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// pgBundle is an outbox in a schema of the test's own, beside a source
// table items(id, version, name) of n rows.
type pgBundle struct {
	pool   *pgxpool.Pool
	driver *heraldpg.Driver
	schema string
}

func setupPG(t *testing.T, n int) *pgBundle {
	t.Helper()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	d, err := heraldpg.New(pool, &heraldpg.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(t.Context()))
	_, err = pool.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE %q.items (id bigint PRIMARY KEY, version int NOT NULL, name text NOT NULL);
		INSERT INTO %q.items SELECT g, 1, 'item ' || g FROM generate_series(1, %d) g`, schema, schema, n))
	require.NoError(t, err)
	return &pgBundle{pool: pool, driver: d, schema: schema}
}

// event is an outbox row as the tests read it.
type event struct {
	Seq      int64
	Key      string
	Backfill string
	Payload  []byte
}

// events reads the outbox in seq order: the order the relay publishes a
// key's events in.
func (b *pgBundle) events(t *testing.T) []event {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), fmt.Sprintf(`SELECT seq, key, coalesce(headers->>'Herald-Backfill', ''), payload
		FROM %q.herald_outbox ORDER BY seq`, b.schema))
	require.NoError(t, err)
	defer rows.Close()
	var out []event
	for rows.Next() {
		var e event
		require.NoError(t, rows.Scan(&e.Seq, &e.Key, &e.Backfill, &e.Payload))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *pgBundle) config(name string) *heraldbackfill.Config {
	return &heraldbackfill.Config{Name: name, Topic: "items", BatchSize: 7,
		Source: heraldbackfill.Source{Table: b.schema + ".items", KeyColumns: []string{"id"}}}
}

func TestBackfillWritesOneMarkedEventPerRowInKeyOrder(t *testing.T) {
	t.Parallel()
	b := setupPG(t, 50)
	bf, err := heraldbackfill.New(b.driver, b.config("first"))
	require.NoError(t, err)
	sum, err := bf.Run(t.Context())
	require.NoError(t, err)
	require.True(t, sum.Done)
	require.EqualValues(t, 50, sum.Rows)
	require.Equal(t, 8, sum.Batches, "7 full batches of 7 and one of 1")
	evs := b.events(t)
	require.Len(t, evs, 50)
	for i, e := range evs {
		require.Equal(t, fmt.Sprint(i+1), e.Key, "key order")
		require.Equal(t, "first", e.Backfill)
		var row map[string]any
		require.NoError(t, json.Unmarshal(e.Payload, &row))
		require.Equal(t, fmt.Sprintf("item %d", i+1), row["name"])
	}

	again, err := bf.Run(t.Context())
	require.NoError(t, err)
	require.True(t, again.Done)
	require.Zero(t, again.RunRows, "a done backfill writes nothing more")
	require.Len(t, b.events(t), 50)
}

func TestBackfillResumesAfterItsLastCommittedKey(t *testing.T) {
	t.Parallel()
	b := setupPG(t, 30)
	ctx, cancel := context.WithCancel(t.Context())
	cfg := b.config("resume")
	batches := 0
	cfg.Progress = func(heraldbackfill.Report) {
		if batches++; batches == 2 {
			cancel()
		}
	}
	bf, err := heraldbackfill.New(b.driver, cfg)
	require.NoError(t, err)
	sum, err := bf.Run(ctx)
	require.NoError(t, err)
	require.True(t, sum.Stopped)
	require.EqualValues(t, 14, sum.Rows)
	require.Equal(t, []string{"14"}, sum.LastKey)

	cfg.Progress = nil
	bf, err = heraldbackfill.New(b.driver, cfg)
	require.NoError(t, err)
	_, left, err := bf.Count(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 16, left, "the dry run counts the rows after the recorded key")
	sum, err = bf.Run(t.Context())
	require.NoError(t, err)
	require.True(t, sum.Done && sum.Resumed)
	require.EqualValues(t, 30, sum.Rows)
	require.EqualValues(t, 16, sum.RunRows)
	evs := b.events(t)
	require.Len(t, evs, 30)
	for i, e := range evs {
		require.Equal(t, fmt.Sprint(i+1), e.Key, "every row once, in key order")
	}
}

func TestBackfillRefusesToResumeOverAnotherSource(t *testing.T) {
	t.Parallel()
	b := setupPG(t, 3)
	bf, err := heraldbackfill.New(b.driver, b.config("same-name"))
	require.NoError(t, err)
	_, err = bf.Run(t.Context())
	require.NoError(t, err)
	cfg := b.config("same-name")
	cfg.Topic = "other"
	bf, err = heraldbackfill.New(b.driver, cfg)
	require.NoError(t, err)
	_, err = bf.Run(t.Context())
	require.ErrorIs(t, err, heraldbackfill.ErrSourceChanged)
	cfg.Restart = true
	bf, err = heraldbackfill.New(b.driver, cfg)
	require.NoError(t, err)
	sum, err := bf.Run(t.Context())
	require.NoError(t, err, "a restart forgets the record")
	require.EqualValues(t, 3, sum.RunRows)
}

func TestBackfillFromAQueryWithExpressionsOrAMap(t *testing.T) {
	t.Parallel()
	b := setupPG(t, 10)
	cfg := &heraldbackfill.Config{Name: "query", Topic: "items", BatchSize: 4, Type: "item.snapshot",
		Source: heraldbackfill.Source{
			Query:      fmt.Sprintf(`SELECT id, version, name FROM %q.items WHERE id %% 2 = 0`, b.schema),
			KeyColumns: []string{"id"},
			Key:        `'item-' || id`,
			Payload:    `name`,
		}}
	bf, err := heraldbackfill.New(b.driver, cfg)
	require.NoError(t, err)
	sum, err := bf.Run(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 5, sum.Rows)
	evs := b.events(t)
	require.Len(t, evs, 5)
	require.Equal(t, "item-2", evs[0].Key)
	require.Equal(t, "item 2", string(evs[0].Payload))

	cfg = &heraldbackfill.Config{Name: "map", BatchSize: 4,
		Source: heraldbackfill.Source{Table: b.schema + ".items", KeyColumns: []string{"id"}},
		Map: func(r heraldbackfill.Row) (herald.Message, error) {
			return herald.Message{Topic: "mapped", Key: "k" + r.Key, Payload: []byte(fmt.Sprint(r.Values["name"])),
				Headers: map[string]string{"source": "map"}}, nil
		}}
	bf, err = heraldbackfill.New(b.driver, cfg)
	require.NoError(t, err)
	sum, err = bf.Run(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 10, sum.Rows)
	var topic, key, payload, hdr, marked string
	require.NoError(t, b.pool.QueryRow(t.Context(), fmt.Sprintf(`SELECT topic, key, convert_from(payload, 'UTF8'), headers->>'source', headers->>'Herald-Backfill'
		FROM %q.herald_outbox WHERE topic = 'mapped' ORDER BY seq LIMIT 1`, b.schema)).Scan(&topic, &key, &payload, &hdr, &marked))
	require.Equal(t, []string{"mapped", "k1", "item 1", "map", "map"}, []string{topic, key, payload, hdr, marked})
}

func TestBackfillOverACompositeKey(t *testing.T) {
	t.Parallel()
	b := setupPG(t, 0)
	_, err := b.pool.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE %q.lines (order_id int, line text, PRIMARY KEY (order_id, line));
		INSERT INTO %q.lines SELECT o, 'l' || l FROM generate_series(1, 5) o, generate_series(1, 3) l`, b.schema, b.schema))
	require.NoError(t, err)
	bf, err := heraldbackfill.New(b.driver, &heraldbackfill.Config{Name: "lines", Topic: "lines", BatchSize: 4,
		Source: heraldbackfill.Source{Table: b.schema + ".lines", KeyColumns: []string{"order_id", "line"}}})
	require.NoError(t, err)
	sum, err := bf.Run(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 15, sum.Rows)
	require.Equal(t, []string{"5", "l3"}, sum.LastKey)
	evs := b.events(t)
	require.Equal(t, "1:l1", evs[0].Key)
	require.Equal(t, "5:l3", evs[14].Key)
}

func TestBackfillReadsTheBacklogThroughTheReadyIndex(t *testing.T) {
	t.Parallel()
	b := setupPG(t, 20)
	bf, err := heraldbackfill.New(b.driver, b.config("backlog"))
	require.NoError(t, err)
	_, err = bf.Run(t.Context())
	require.NoError(t, err)
	n, err := b.driver.ReadyBacklog(t.Context(), 5)
	require.NoError(t, err)
	require.Equal(t, 5, n, "counted up to the bound")
	n, err = b.driver.ReadyBacklog(t.Context(), 100)
	require.NoError(t, err)
	require.Equal(t, 20, n)
}
