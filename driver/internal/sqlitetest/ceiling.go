package sqlitetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/herald-outbox/herald"
)

// ceilingSQL claims the oldest ready events and marks them published in
// one statement: the reference heralddrivertest.BenchRelayDrain measures
// the relay against. It writes each row once and waits for nothing, and is
// not a correct relay: a crash after it, or a broker that refuses, loses
// the batch, and nothing fences a second worker. It probes the ready index
// as the driver's claim does.
const ceilingSQL = `UPDATE %[1]s
SET state = 'published', published_at = %[2]s, attempts = attempts + 1
WHERE seq IN (
	SELECT seq FROM %[1]s
	WHERE state = 'ready' AND available_at <= %[2]s
	ORDER BY available_at, seq
	LIMIT ?1)
RETURNING id, seq, topic, key, type, aggregate_type, aggregate_id,
	event_version, coalesce(aggregate_version, 0), payload, headers, created_at`

// nowMicros is the database clock in microseconds, as heraldsqlite
// computes it.
const nowMicros = `(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)`

// ceiling returns the Driver.Ceiling of the outbox table on db.
func ceiling(db *sql.DB, table string) func(ctx context.Context, limit int) ([]herald.Envelope, error) {
	query := fmt.Sprintf(ceilingSQL, table, nowMicros)
	return func(ctx context.Context, limit int) ([]herald.Envelope, error) {
		rows, err := db.QueryContext(ctx, query, limit)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var batch []herald.Envelope
		for rows.Next() {
			var (
				e       herald.Envelope
				headers string
				created int64
			)
			if err := rows.Scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
				&e.EventVersion, &e.AggregateVersion, &e.Payload, &headers, &created); err != nil {
				return nil, err
			}
			if err := json.Unmarshal([]byte(headers), &e.Headers); err != nil {
				return nil, fmt.Errorf("headers of %s: %w", e.ID, err)
			}
			e.CreatedAt, e.Attempt = time.UnixMicro(created), 1
			batch = append(batch, e)
		}
		return batch, rows.Err()
	}
}
