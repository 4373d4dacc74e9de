package heraldinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldinbox"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend is one database under test, seen the same way by every case:
// process runs the handler through the inbox with an "effects" table write
// as its side effect.
type backend struct {
	ib *heraldinbox.Inbox
	// process handles one delivery of eventID for consumer; fail makes the
	// handler return an error after writing its effect.
	process func(ctx context.Context, consumer, eventID string, fail bool) (bool, error)
	// effects counts effect rows, and distinct event ids among them.
	effects  func(t *testing.T) (rows, distinct int)
	cleanup  func(ctx context.Context, olderThan time.Duration, limit int) (int, error)
	backdate func(t *testing.T, d time.Duration)

	// advance handles one delivery of eventID for consumer with the
	// version check: the handler advances a's version, then writes
	// (event id, version) to an "applied" table, then returns what then
	// returns (nil: commit), if then is not nil.
	advance func(ctx context.Context, consumer, eventID string, a heraldinbox.Aggregate, then func() error) (bool, error)
	// applied lists the versions applied to aggregateID (all: "") in the
	// order their effects were written.
	applied func(t *testing.T, aggregateID string) []int64
	// version reads the version recorded for consumer and a (false: none).
	version func(t *testing.T, consumer string, a heraldinbox.Aggregate) (int64, bool)
	// lockWaiters counts the sessions waiting for a row lock in a
	// statement on the test's tables; nil on SQLite, whose transactions
	// wait for the database's lock before their first statement.
	lockWaiters func(t *testing.T) int
	// migrate runs the inbox's migrations again; exec runs a statement.
	migrate func(ctx context.Context) error
	exec    func(t *testing.T, query string)
}

var errHandler = errors.New("handler failed")

// fail is a handler's end that fails.
func fail() error { return errHandler }

// readVersion reads a version through row, for backend.version.
func readVersion(t *testing.T, row interface{ Scan(...any) error }) (int64, bool) {
	var v int64
	err := row.Scan(&v)
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
		return 0, false
	}
	require.NoError(t, err)
	return v, true
}

func pgxBackend(t *testing.T) *backend {
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	ib, err := heraldinbox.NewPostgres(&heraldinbox.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, ib.MigratePgx(ctx, pool))
	require.NoError(t, ib.MigratePgx(ctx, pool), "migrate is idempotent")
	_, err = pool.Exec(ctx, `CREATE TABLE `+schema+`.effects (event_id text NOT NULL)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE `+schema+`.applied (seq bigserial PRIMARY KEY, event_id text NOT NULL, aggregate_id text NOT NULL, version bigint NOT NULL)`)
	require.NoError(t, err)
	return &backend{
		ib:          ib,
		lockWaiters: func(t *testing.T) int { return lockWaiters(t, pool, schema) },
		migrate:     func(ctx context.Context) error { return ib.MigratePgx(ctx, pool) },
		exec: func(t *testing.T, query string) {
			_, err := pool.Exec(ctx, query)
			require.NoError(t, err)
		},
		process: func(ctx context.Context, consumer, id string, fail bool) (bool, error) {
			return ib.ProcessPgx(ctx, pool, consumer, id, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects VALUES ($1)`, id); err != nil {
					return err
				}
				if fail {
					return errHandler
				}
				return nil
			})
		},
		effects: func(t *testing.T) (int, int) {
			var n, d int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM `+schema+`.effects`).Scan(&n, &d))
			return n, d
		},
		cleanup: func(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
			return ib.CleanupPgx(ctx, pool, olderThan, limit)
		},
		backdate: func(t *testing.T, d time.Duration) {
			_, err := pool.Exec(ctx, `UPDATE `+ib.Table()+` SET processed_at = processed_at - $1 * interval '1 microsecond'`, d.Microseconds())
			require.NoError(t, err)
		},
		advance: func(ctx context.Context, consumer, id string, a heraldinbox.Aggregate, then func() error) (bool, error) {
			return ib.ProcessPgx(ctx, pool, consumer, id, func(ctx context.Context, tx pgx.Tx) error {
				if err := ib.AdvancePgx(ctx, tx, consumer, a); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.applied (event_id, aggregate_id, version) VALUES ($1, $2, $3)`, id, a.ID, a.Version); err != nil {
					return err
				}
				if then != nil {
					return then()
				}
				return nil
			})
		},
		applied: func(t *testing.T, aggregateID string) []int64 {
			rows, err := pool.Query(ctx, `SELECT version FROM `+schema+`.applied WHERE aggregate_id = $1 OR $1 = '' ORDER BY seq`, aggregateID)
			require.NoError(t, err)
			vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			return vs
		},
		version: func(t *testing.T, consumer string, a heraldinbox.Aggregate) (int64, bool) {
			return readVersion(t, pool.QueryRow(ctx, `SELECT version FROM `+ib.VersionTable()+
				` WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3`, consumer, a.Type, a.ID))
		},
	}
}

// sqlDB is a database/sql database under test: qualified names its test
// tables, ph is its first placeholder, and the rest is its dialect's SQL.
type sqlDB struct {
	db          *sql.DB
	ib          *heraldinbox.Inbox
	qualified   func(table string) string
	ph          [3]string // the first three placeholders
	appliedDDL  string    // the applied table's columns
	backdateSQL string    // %s: the inbox table
}

func sqlBackend(t *testing.T, s sqlDB) *backend {
	ctx := context.Background()
	db, ib := s.db, s.ib
	require.NoError(t, ib.MigrateSQL(ctx, db))
	require.NoError(t, ib.MigrateSQL(ctx, db), "migrate is idempotent")
	effects, applied := s.qualified("effects"), s.qualified("applied")
	_, err := db.ExecContext(ctx, `CREATE TABLE `+effects+` (event_id text NOT NULL)`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `CREATE TABLE `+applied+` (`+s.appliedDDL+`)`)
	require.NoError(t, err)
	return &backend{
		ib:      ib,
		migrate: func(ctx context.Context) error { return ib.MigrateSQL(ctx, db) },
		exec: func(t *testing.T, query string) {
			_, err := db.ExecContext(ctx, query)
			require.NoError(t, err)
		},
		process: func(ctx context.Context, consumer, id string, fail bool) (bool, error) {
			return ib.ProcessSQL(ctx, db, consumer, id, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` VALUES (`+s.ph[0]+`)`, id); err != nil {
					return err
				}
				if fail {
					return errHandler
				}
				return nil
			})
		},
		effects: func(t *testing.T) (int, int) {
			var n, d int
			require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT event_id) FROM `+effects).Scan(&n, &d))
			return n, d
		},
		cleanup: func(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
			return ib.CleanupSQL(ctx, db, olderThan, limit)
		},
		backdate: func(t *testing.T, d time.Duration) {
			_, err := db.ExecContext(ctx, fmt.Sprintf(s.backdateSQL, ib.Table()), d.Microseconds())
			require.NoError(t, err)
		},
		advance: func(ctx context.Context, consumer, id string, a heraldinbox.Aggregate, then func() error) (bool, error) {
			return ib.ProcessSQL(ctx, db, consumer, id, func(ctx context.Context, tx *sql.Tx) error {
				if err := ib.AdvanceSQL(ctx, tx, consumer, a); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+applied+` (event_id, aggregate_id, version) VALUES (`+s.ph[0]+`, `+s.ph[1]+`, `+s.ph[2]+`)`, id, a.ID, a.Version); err != nil {
					return err
				}
				if then != nil {
					return then()
				}
				return nil
			})
		},
		applied: func(t *testing.T, aggregateID string) []int64 {
			rows, err := db.QueryContext(ctx, `SELECT version FROM `+applied+` WHERE aggregate_id = `+s.ph[0]+` OR `+s.ph[1]+` = '' ORDER BY seq`,
				aggregateID, aggregateID)
			require.NoError(t, err)
			defer rows.Close()
			var vs []int64
			for rows.Next() {
				var v int64
				require.NoError(t, rows.Scan(&v))
				vs = append(vs, v)
			}
			require.NoError(t, rows.Err())
			return vs
		},
		version: func(t *testing.T, consumer string, a heraldinbox.Aggregate) (int64, bool) {
			q := strings.NewReplacer("$1", "?", "$2", "?", "$3", "?")
			if s.ph[0] == "$1" {
				q = strings.NewReplacer()
			}
			return readVersion(t, db.QueryRowContext(ctx, q.Replace(`SELECT version FROM `+ib.VersionTable()+
				` WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3`), consumer, a.Type, a.ID))
		},
	}
}

func pgStdlibBackend(t *testing.T) *backend {
	pool := testenv.PostgresPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	schema := testenv.Schema(t)
	ib, err := heraldinbox.NewPostgres(&heraldinbox.Config{Schema: schema})
	require.NoError(t, err)
	b := sqlBackend(t, sqlDB{
		db: db, ib: ib, qualified: func(table string) string { return schema + "." + table }, ph: [3]string{"$1", "$2", "$3"},
		appliedDDL:  `seq bigserial PRIMARY KEY, event_id text NOT NULL, aggregate_id text NOT NULL, version bigint NOT NULL`,
		backdateSQL: `UPDATE %s SET processed_at = processed_at - $1 * interval '1 microsecond'`,
	})
	b.lockWaiters = func(t *testing.T) int { return lockWaiters(t, pool, schema) }
	return b
}

func sqliteBackend(t *testing.T) *backend {
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "consumer.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ib, err := heraldinbox.NewSQLite(nil)
	require.NoError(t, err)
	return sqlBackend(t, sqlDB{
		db: db, ib: ib, qualified: func(table string) string { return table }, ph: [3]string{"?", "?", "?"},
		appliedDDL:  `seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, aggregate_id TEXT NOT NULL, version INTEGER NOT NULL`,
		backdateSQL: `UPDATE %s SET processed_at = processed_at - ?`,
	})
}

// mysqlDB opens the test server and makes a database of the test's own.
func mysqlDB(t *testing.T) (*sql.DB, string) {
	db, err := sql.Open("mysql", testenv.MySQL(t))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db, testenv.MySQLDatabase(t, db)
}

func mysqlBackend(t *testing.T) *backend {
	db, database := mysqlDB(t)
	ib, err := heraldinbox.NewMySQL(&heraldinbox.Config{Schema: database})
	require.NoError(t, err)
	b := sqlBackend(t, sqlDB{
		db: db, ib: ib, qualified: func(table string) string { return database + "." + table }, ph: [3]string{"?", "?", "?"},
		appliedDDL:  `seq BIGINT AUTO_INCREMENT PRIMARY KEY, event_id TEXT NOT NULL, aggregate_id TEXT NOT NULL, version BIGINT NOT NULL`,
		backdateSQL: `UPDATE %s SET processed_at = processed_at - INTERVAL ? MICROSECOND`,
	})
	// A transaction waiting for a row lock, as InnoDB lists it, or a
	// statement on the test's database that has been running for a second
	// at least: MariaDB does not always list a statement that waits at a
	// duplicate key as LOCK WAIT (seen on 10.11 with an INSERT ... ON
	// DUPLICATE KEY UPDATE waiting 30 s), and a statement of these tests
	// runs that long only when it waits.
	b.lockWaiters = func(t *testing.T) int {
		var n int
		require.NoError(t, db.QueryRowContext(context.Background(), `SELECT
			(SELECT COUNT(*) FROM information_schema.INNODB_TRX
			 WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE CONCAT('%', ?, '%')) +
			(SELECT COUNT(*) FROM information_schema.PROCESSLIST
			 WHERE TIME >= 1 AND INFO LIKE CONCAT('%', ?, '%'))`, database, database).Scan(&n))
		return n
	}
	return b
}

var backends = map[string]func(t *testing.T) *backend{
	"PostgreSQLOverPgx":         pgxBackend,
	"PostgreSQLOverDatabaseSQL": pgStdlibBackend,
	"SQLite":                    sqliteBackend,
	"MySQL":                     mysqlBackend,
}

func eachBackend(t *testing.T, fn func(t *testing.T, b *backend)) {
	for name, mk := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, mk(t))
		})
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = herald.NewID()
	}
	return out
}

// The seeds' consumer gate: 100 events delivered, all 100 again, a random
// subset a third time, concurrently on 4 consumers: exactly 100 effects.
func TestReplayedDeliveriesLeaveExactlyOneEffectEach(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		events := ids(100)
		var deliveries []string
		deliveries = append(deliveries, events...)
		deliveries = append(deliveries, events...)
		for _, id := range events {
			if rand.IntN(3) == 0 {
				deliveries = append(deliveries, id)
			}
		}
		rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

		var (
			processed, skipped atomic.Int64
			next               atomic.Int64
			wg                 sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(deliveries) {
						return
					}
					ok, err := b.process(ctx, "billing", deliveries[i], false)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						processed.Add(1)
					} else {
						skipped.Add(1)
					}
				}
			})
		}
		wg.Wait()
		rows, distinct := b.effects(t)
		require.Equal(t, 100, rows, "side effects")
		require.Equal(t, 100, distinct)
		require.Equal(t, int64(100), processed.Load())
		require.Equal(t, int64(len(deliveries)-100), skipped.Load(), "every other delivery was recognised")

		// Another consumer of the same events has an inbox of its own.
		ok, err := b.process(ctx, "search-indexer", events[0], false)
		require.NoError(t, err)
		require.True(t, ok)
	})
}

// A handler that fails once rolls back its effect and the inbox record, so
// the redelivery runs it again: each effect exists exactly once.
func TestHandlerFailureRollsBackAndRedeliveryRetries(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		events := ids(30)
		for i, id := range events {
			ok, err := b.process(ctx, "billing", id, i%3 == 0)
			if i%3 == 0 {
				require.ErrorIs(t, err, errHandler)
				require.False(t, ok)
			} else {
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		rows, _ := b.effects(t)
		require.Equal(t, 20, rows, "failed handlers left no effect")
		for _, id := range events { // the broker redelivers everything
			_, err := b.process(ctx, "billing", id, false)
			require.NoError(t, err)
		}
		rows, distinct := b.effects(t)
		require.Equal(t, 30, rows)
		require.Equal(t, 30, distinct)
	})
}

func TestDuplicateDoesNotRunTheHandler(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		id := herald.NewID()
		ok, err := b.process(ctx, "c", id, false)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.process(ctx, "c", id, true) // would fail if it ran
		require.NoError(t, err)
		require.False(t, ok)
		rows, _ := b.effects(t)
		require.Equal(t, 1, rows)
	})
}

func TestCleanupRemovesOnlyOldRows(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		old := ids(5)
		for _, id := range old {
			_, err := b.process(ctx, "c", id, false)
			require.NoError(t, err)
		}
		b.backdate(t, 48*time.Hour)
		recent := herald.NewID()
		_, err := b.process(ctx, "c", recent, false)
		require.NoError(t, err)

		n, err := b.cleanup(ctx, 24*time.Hour, 3)
		require.NoError(t, err)
		require.Equal(t, 3, n, "the limit holds")
		n, err = b.cleanup(ctx, 24*time.Hour, 3)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		ok, err := b.process(ctx, "c", recent, false)
		require.NoError(t, err)
		require.False(t, ok, "the recent record was kept")
	})
}

// Two deliveries of one event at the same moment: the second waits at the
// unique key for the first, then reports "already processed". Neither fails.
func TestConcurrentDuplicatesResolveAtTheUniqueKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	ib, err := heraldinbox.NewPostgres(&heraldinbox.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, ib.MigratePgx(ctx, pool))
	id := herald.NewID()

	inside, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	first := make(chan error, 1)
	go func() {
		ok, err := ib.ProcessPgx(ctx, pool, "c", id, func(context.Context, pgx.Tx) error {
			runs.Add(1)
			close(inside)
			<-release
			return nil
		})
		if err == nil && !ok {
			err = errors.New("first delivery was not processed")
		}
		first <- err
	}()
	<-inside
	type result struct {
		ok  bool
		err error
	}
	second := make(chan result, 1)
	go func() {
		ok, err := ib.ProcessPgx(ctx, pool, "c", id, func(context.Context, pgx.Tx) error {
			runs.Add(1)
			return nil
		})
		second <- result{ok, err}
	}()
	// The second delivery is now blocked on the first's uncommitted key.
	require.Eventually(t, func() bool { return lockWaiters(t, pool, schema) > 0 }, 10*time.Second, 5*time.Millisecond)
	close(release)
	require.NoError(t, <-first)
	r := <-second
	require.NoError(t, r.err)
	require.False(t, r.ok, "the second delivery reports already processed")
	require.Equal(t, int64(1), runs.Load())
}

// lockWaiters counts sessions waiting on a lock in a statement on schema.
func lockWaiters(t *testing.T, pool *pgxpool.Pool, schema string) int {
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, schema).Scan(&n))
	return n
}

func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	for _, cfg := range []heraldinbox.Config{
		{Table: "Bad"}, {Schema: "x-y"}, {Table: `a"b`},
		{VersionTable: "Bad"}, {VersionTable: "a`b"}, {Table: "x", VersionTable: "x"}, {VersionTable: "herald_inbox"},
	} {
		for _, mk := range []func(*heraldinbox.Config) (*heraldinbox.Inbox, error){heraldinbox.NewPostgres, heraldinbox.NewMySQL} {
			_, err := mk(&cfg)
			require.Error(t, err, "%+v", cfg)
		}
	}
	_, err := heraldinbox.NewSQLite(&heraldinbox.Config{Table: "1x"})
	require.Error(t, err)
	_, err = heraldinbox.NewSQLite(&heraldinbox.Config{VersionTable: "1x"})
	require.Error(t, err)
	ib, err := heraldinbox.NewSQLite(&heraldinbox.Config{Schema: "Ignored-On-SQLite"})
	require.NoError(t, err)
	require.Equal(t, `"herald_inbox_versions"`, ib.VersionTable())
	ib, err = heraldinbox.NewMySQL(&heraldinbox.Config{Schema: "app", Table: "inbox"})
	require.NoError(t, err)
	require.Equal(t, "`app`.`inbox`", ib.Table())
	require.Equal(t, "`app`.`inbox_versions`", ib.VersionTable())
	b := sqliteBackend(t)
	for _, k := range [][2]string{{"", "id"}, {"c", ""}, {"c\x00", "id"}, {"c", string(make([]byte, 300))}} {
		_, err := b.process(context.Background(), k[0], k[1], false)
		require.Error(t, err, "%q", k)
	}
	rows, _ := b.effects(t)
	require.Zero(t, rows)
}
