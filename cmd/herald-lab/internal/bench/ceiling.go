package bench

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
)

// The ceiling is the reference Herald's relay is measured against: a
// relay that claims a batch and marks it published in ONE statement, then
// publishes it. It writes each row once instead of twice and waits for no
// acknowledgement, but it is not correct: a crash between its statement
// and the broker's confirmation loses the batch, and with several workers
// a key's events are not kept in order. What Herald does beyond it is the
// price of those guarantees; the drain reports Herald's rate as a share of
// the ceiling's, measured in the same run.
const ceilingSQL = `UPDATE %[1]s o
SET state = 'published', published_at = now(), attempts = o.attempts + 1
FROM (
	SELECT id FROM %[1]s
	WHERE state = 'ready' AND available_at <= now()
	ORDER BY available_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED
) next
WHERE o.id = next.id
RETURNING o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id,
	o.event_version, coalesce(o.aggregate_version, 0), o.payload, o.headers, o.created_at`

// The ceiling on MySQL and MariaDB, which have no UPDATE ... RETURNING:
// the cheapest claim and mark that still hands the rows to the broker.
// One READ COMMITTED transaction (as the driver's claims, so that InnoDB
// locks rows and not the gaps between them) of two statements: a locking
// read of the oldest ready rows, whole, by the ready index, skipping rows
// another worker holds (ceilingMySQLSelect), then one UPDATE that marks
// those rows published by their primary keys (ceilingMySQLMark, the seqs
// written into the statement as integers); the commit, then the publish.
// It is unsafe for the same reasons as on PostgreSQL: the rows are
// published as committed before the broker has them, so a crash, or a
// broker that refuses, after the commit loses the batch; nothing fences
// a worker (no token, no lease), and with several workers a key's events
// can reach the broker out of order. Herald claims (a lease and a token),
// reads the rows after that commit, publishes, then acknowledges in a
// second transaction.
const (
	ceilingMySQLSelect = "SELECT id, seq, topic, `key`, type, aggregate_type, aggregate_id,\n" +
		"event_version, COALESCE(aggregate_version, 0), payload, headers, created_at\n" +
		"FROM %[1]s FORCE INDEX (%[2]s_ready_idx)\n" +
		"WHERE state = 'ready' AND available_at <= UTC_TIMESTAMP(6)\n" +
		"ORDER BY available_at, seq\n" +
		"LIMIT %[3]d\n" +
		"FOR UPDATE SKIP LOCKED"
	ceilingMySQLMark = "UPDATE %[1]s SET state = 'published', published_at = UTC_TIMESTAMP(6), attempts = attempts + 1\n" +
		"WHERE seq IN (%[2]s)"
)

// drainCeiling times the ceiling draining the loaded backlog to pub, with
// as many workers as the relay has batches in flight.
func drainCeiling(ctx context.Context, e *env, name string, pub herald.Publisher) (*DrainTarget, error) {
	o := e.o
	var worker ceilingWorkerFunc
	if e.my != nil {
		db, err := openMySQL(ctx, e.my.cfg, o.maxInFlight)
		if err != nil {
			return nil, err
		}
		defer e.closeDB(db)
		worker = func(ctx context.Context, store *timedStore, pub *timedPublisher, published *atomic.Int64) error {
			return ceilingWorkerMySQL(ctx, e, db, store, pub, published)
		}
	} else {
		pool, err := e.newPool(ctx, o.maxInFlight)
		if err != nil {
			return nil, err
		}
		defer e.closePool(pool)
		worker = func(ctx context.Context, store *timedStore, pub *timedPublisher, published *atomic.Int64) error {
			return ceilingWorker(ctx, e, pool, store, pub, published)
		}
	}
	return runCeiling(ctx, e, name, systemCeiling, pub, worker)
}

// ceilingWorkerFunc is one worker of a ceiling: it claims, marks and
// publishes batches until a claim finds nothing.
type ceilingWorkerFunc func(ctx context.Context, store *timedStore, pub *timedPublisher, published *atomic.Int64) error

// runCeiling times system's workers draining the loaded backlog to pub,
// as many as the relay has batches in flight.
func runCeiling(ctx context.Context, e *env, name, system string, pub herald.Publisher, worker ceilingWorkerFunc) (*DrainTarget, error) {
	o := e.o
	store := &timedStore{}
	tpub := &timedPublisher{Publisher: pub}
	var (
		published atomic.Int64
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
	)
	cpu := startCPU(e, system+"-"+name)
	start := time.Now()
	for range o.maxInFlight {
		wg.Go(func() {
			if err := worker(ctx, store, tpub, &published); err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return nil, fmt.Errorf("%s: %w", system, firstErr)
	}
	n := published.Load()
	r := &DrainTarget{
		Name: name, System: system, Events: o.events,
		Seconds: round(elapsed.Seconds(), 3), EventsPerSec: round2(float64(n) / elapsed.Seconds()),
		Published: n, Breakdown: breakdown(store, tpub, elapsed),
	}
	r.DatabaseCPUPerEventUS, r.ProcessCPUPerEventUS = cpu.stop(n)
	return r, nil
}

// ceilingWorker claims-and-marks batches and publishes them until a claim
// finds nothing.
func ceilingWorker(ctx context.Context, e *env, pool *pgxpool.Pool, store *timedStore, pub *timedPublisher,
	published *atomic.Int64) error {
	query := fmt.Sprintf(ceilingSQL, e.outbox)
	for {
		t := time.Now()
		rows, err := pool.Query(ctx, query, e.o.batchSize)
		if err != nil {
			return err
		}
		var batch []herald.Envelope
		for rows.Next() {
			var env herald.Envelope
			if err := rows.Scan(&env.ID, &env.Seq, &env.Topic, &env.Key, &env.Type, &env.AggregateType,
				&env.AggregateID, &env.EventVersion, &env.AggregateVersion, &env.Payload, &env.Headers, &env.CreatedAt); err != nil {
				rows.Close()
				return err
			}
			env.Attempt = 1
			env.Ordered = !e.o.unordered && env.Key != ""
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

// sortBySeq puts a claimed batch in commit order: UPDATE ... RETURNING
// returns its rows in no set order.
func sortBySeq(batch []herald.Envelope) {
	slices.SortFunc(batch, func(a, b herald.Envelope) int { return cmp.Compare(a.Seq, b.Seq) })
}

// ceilingWorkerMySQL is ceilingWorker on MySQL: it claims-and-marks
// batches in one transaction each and publishes them until a claim finds
// nothing.
func ceilingWorkerMySQL(ctx context.Context, e *env, db *sql.DB, store *timedStore, pub *timedPublisher,
	published *atomic.Int64) error {
	table := strings.TrimPrefix(e.outbox, "`"+e.schema+"`.")
	query := fmt.Sprintf(ceilingMySQLSelect, e.outbox, strings.Trim(table, "`"), e.o.batchSize)
	for {
		t := time.Now()
		batch, err := ceilingClaimMySQL(ctx, e, db, query)
		if err != nil {
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

// ceilingClaimMySQL runs the ceiling's transaction: lock and read a batch,
// mark it published, commit.
func ceilingClaimMySQL(ctx context.Context, e *env, db *sql.DB, query string) ([]herald.Envelope, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	var (
		batch []herald.Envelope
		seqs  strings.Builder
	)
	for rows.Next() {
		var (
			env     herald.Envelope
			headers []byte
			created mysqlTime
		)
		if err := rows.Scan(&env.ID, &env.Seq, &env.Topic, &env.Key, &env.Type, &env.AggregateType,
			&env.AggregateID, &env.EventVersion, &env.AggregateVersion, &env.Payload, &headers, &created); err != nil {
			rows.Close()
			return nil, err
		}
		if err := json.Unmarshal(headers, &env.Headers); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading headers: %w", err)
		}
		env.CreatedAt = created.t
		env.Attempt = 1
		env.Ordered = !e.o.unordered && env.Key != ""
		batch = append(batch, env)
		if seqs.Len() > 0 {
			seqs.WriteByte(',')
		}
		seqs.WriteString(strconv.FormatInt(env.Seq, 10))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		return nil, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(ceilingMySQLMark, e.outbox, seqs.String())); err != nil {
		return nil, fmt.Errorf("marking: %w", err)
	}
	return batch, tx.Commit()
}

// mysqlTime scans a DATETIME(6) column whatever the DSN's parseTime: a
// time.Time, or its text in UTC.
type mysqlTime struct{ t time.Time }

func (m *mysqlTime) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		m.t = v
		return nil
	case []byte:
		t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", string(v), time.UTC)
		m.t = t
		return err
	default:
		return fmt.Errorf("created_at: unexpected %T", src)
	}
}
