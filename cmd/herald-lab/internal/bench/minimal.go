package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
)

// The minimal ceiling is the cheapest outbox a team could write by hand,
// on a table of its own: the six columns an event needs, its primary key
// and one partial index on the unpublished rows, drained by one statement
// that claims a batch and marks it published. Herald's own ceiling
// (ceilingSQL) claims and marks rows of Herald's table, with its indexes
// and columns; against it a ratio shows what Herald's claim and
// acknowledgement cost, against this one also what Herald's schema costs.
// It is unsafe in the same ways as the other ceiling (see ceilingSQL).
const (
	systemMinimal = "minimal"

	minimalTableSQL = `CREATE TABLE %[1]s (
	id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	topic        text        NOT NULL,
	key          text        NOT NULL,
	payload      bytea       NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	published_at timestamptz
);
CREATE INDEX ON %[1]s (id) WHERE published_at IS NULL`

	minimalClaimSQL = `UPDATE %[1]s SET published_at = now()
WHERE id = ANY(ARRAY(
	SELECT id FROM %[1]s WHERE published_at IS NULL
	ORDER BY id LIMIT $1
	FOR UPDATE SKIP LOCKED))
RETURNING id, topic, key, payload, created_at`
)

// minimalTable is the minimal ceiling's table, quoted and schema-qualified.
func (e *env) minimalTable() string { return `"` + e.schema + `"."minimal_outbox"` }

// createMinimal creates the minimal ceiling's table in the run's schema.
func (e *env) createMinimal(ctx context.Context) error {
	if _, err := e.admin.Exec(ctx, fmt.Sprintf(minimalTableSQL, e.minimalTable())); err != nil {
		return fmt.Errorf("creating the minimal outbox table: %w", err)
	}
	return nil
}

// loadMinimal empties the minimal table and writes the backlog into it:
// the same topic, keys and payloads as loadBacklog writes into Herald's.
// The ids go on from the last round's (no RESTART IDENTITY): they are the
// events' ids, which JetStream deduplicates within its window.
func loadMinimal(ctx context.Context, e *env) error {
	if _, err := e.admin.Exec(ctx, `TRUNCATE `+e.minimalTable()); err != nil {
		return fmt.Errorf("truncating the minimal table: %w", err)
	}
	conn, err := e.admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	n, keys, i := e.o.events, e.o.keys, 0
	rows := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		customer := "customer-" + strconv.Itoa(i%keys)
		return []any{drainSubject, customer, paddedPayload(int64(i), customer, e.o.payloadBytes)}, nil
	})
	if _, err := conn.Conn().CopyFrom(ctx, pgx.Identifier{e.schema, "minimal_outbox"},
		[]string{"topic", "key", "payload"}, rows); err != nil {
		return fmt.Errorf("loading the minimal backlog: %w", err)
	}
	if _, err := e.admin.Exec(ctx, `ANALYZE `+e.minimalTable()); err != nil {
		return fmt.Errorf("analyzing: %w", err)
	}
	return nil
}

// countMinimalUnpublished counts the minimal table's rows, and those not
// marked published.
func (e *env) countMinimal(ctx context.Context) (rows, unpublished int, err error) {
	err = e.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE published_at IS NULL) FROM `+
		e.minimalTable()).Scan(&rows, &unpublished)
	if err != nil {
		return 0, 0, fmt.Errorf("counting the minimal table: %w", err)
	}
	return rows, unpublished, nil
}

// drainMinimal times the minimal ceiling draining its loaded backlog to
// pub, with as many workers as the relay has batches in flight.
func drainMinimal(ctx context.Context, e *env, name string, pub herald.Publisher) (*DrainTarget, error) {
	pool, err := e.newPool(ctx, e.o.maxInFlight)
	if err != nil {
		return nil, err
	}
	defer e.closePool(pool)
	return runCeiling(ctx, e, name, systemMinimal, pub,
		func(ctx context.Context, store *timedStore, pub *timedPublisher, published *atomic.Int64) error {
			return minimalWorker(ctx, e, pool, store, pub, published)
		})
}

// minimalWorker claims-and-marks batches of the minimal table and
// publishes them until a claim finds nothing. The events carry what the
// table has: the row's id (as the event's id), topic, key and payload.
func minimalWorker(ctx context.Context, e *env, pool *pgxpool.Pool, store *timedStore, pub *timedPublisher,
	published *atomic.Int64) error {
	query := fmt.Sprintf(minimalClaimSQL, e.minimalTable())
	for {
		t := time.Now()
		rows, err := pool.Query(ctx, query, e.o.batchSize)
		if err != nil {
			return err
		}
		var batch []herald.Envelope
		for rows.Next() {
			var (
				env herald.Envelope
				id  int64
			)
			if err := rows.Scan(&id, &env.Topic, &env.Key, &env.Payload, &env.CreatedAt); err != nil {
				rows.Close()
				return err
			}
			env.ID, env.Seq, env.Attempt = strconv.FormatInt(id, 10), id, 1
			env.Ordered = !e.o.unordered
			batch = append(batch, env)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		store.claims.Add(1)
		store.claimNanos.Add(int64(time.Since(t)))
		sortBySeq(batch)
		if err := pub.Publish(ctx, batch); err != nil {
			return fmt.Errorf("publishing: %w", err)
		}
		published.Add(int64(len(batch)))
	}
}
