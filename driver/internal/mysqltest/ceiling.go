package mysqltest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
)

// The reference heralddrivertest.BenchRelayDrain measures the relay
// against on MySQL: the least a worker can do to take the oldest ready
// events and mark them published. MySQL's UPDATE returns no rows, so it is
// one locking read of the rows, payloads included (by the ready index,
// skipping locked rows, as the driver's claim reads), and one UPDATE by
// seq that marks them published, in one READ COMMITTED transaction. It
// writes each row once and waits for nothing, and is not a correct relay:
// a crash after it, or a broker that refuses, loses the batch, and no
// token fences anything.
const (
	ceilingReadSQL = "SELECT seq, id, topic, `key`, type, aggregate_type, aggregate_id,\n" +
		"\tevent_version, COALESCE(aggregate_version, 0), payload, headers, DATE_FORMAT(created_at, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')\n" +
		"\tFROM %[1]s FORCE INDEX (%[2]s_ready_idx)\n" +
		"\tWHERE state = 'ready' AND available_at <= UTC_TIMESTAMP(6)\n" +
		"\tORDER BY available_at, seq LIMIT ?\n" +
		"\tFOR UPDATE SKIP LOCKED"
	ceilingMarkSQL = "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (s BIGINT PATH '$')) j\n" +
		"\tSTRAIGHT_JOIN %[1]s o FORCE INDEX (PRIMARY) ON o.seq = j.s\n" +
		"\tSET o.published_at = UTC_TIMESTAMP(6), o.attempts = o.attempts + 1, o.state = 'published'"
)

// ceiling returns the Driver.Ceiling of the outbox table on db; name is
// the table's bare name, for its index names.
func ceiling(db *sql.DB, table, name string) func(ctx context.Context, limit int) ([]herald.Envelope, error) {
	read, mark := fmt.Sprintf(ceilingReadSQL, table, name), fmt.Sprintf(ceilingMarkSQL, table)
	return func(ctx context.Context, limit int) ([]herald.Envelope, error) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback() }()
		rows, err := tx.QueryContext(ctx, read, limit)
		if err != nil {
			return nil, err
		}
		var (
			batch []herald.Envelope
			seqs  []int64
		)
		for rows.Next() {
			var (
				e       herald.Envelope
				headers []byte
				created string
			)
			if err := rows.Scan(&e.Seq, &e.ID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
				&e.EventVersion, &e.AggregateVersion, &e.Payload, &headers, &created); err != nil {
				_ = rows.Close()
				return nil, err
			}
			if err := json.Unmarshal(headers, &e.Headers); err != nil {
				_ = rows.Close()
				return nil, fmt.Errorf("headers of %s: %w", e.ID, err)
			}
			if e.CreatedAt, err = time.ParseInLocation("2006-01-02 15:04:05.999999", strings.TrimSpace(created), time.UTC); err != nil {
				_ = rows.Close()
				return nil, fmt.Errorf("created_at of %s: %w", e.ID, err)
			}
			e.Attempt = 1
			batch, seqs = append(batch, e), append(seqs, e.Seq)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil || len(batch) == 0 {
			return nil, err
		}
		list, err := json.Marshal(seqs)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, mark, string(list)); err != nil {
			return nil, err
		}
		return batch, tx.Commit()
	}
}
