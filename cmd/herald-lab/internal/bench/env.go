package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// env is what every benchmark shares: the database, the run's own schema and
// the embedded NATS server.
type env struct {
	o         options
	log       *slog.Logger
	poolCfg   *pgxpool.Config // parsed from the DSN; copied for each pool
	admin     *pgxpool.Pool   // setup, truncation and counts
	schema    string
	pgCfg     *heraldpg.Config
	outbox    string // quoted, schema-qualified outbox table
	orders    string // quoted, schema-qualified business table
	pgVersion string
	nats      *natsEnv
	// my is the database when --db is a mysql:// URL (drain only); nil on
	// PostgreSQL, whose pools are the fields above.
	my *mysqlDB
	// beforePoolClose runs before a pool closes, while its server
	// processes still exist: the noise sampler reads their CPU time.
	beforePoolClose func()
	// profiles counts the CPU profiles written (--cpuprofile).
	profiles int
}

// describeDSN names the database without its password.
func describeDSN(dsn string) string {
	if isMySQL(dsn) {
		return describeMySQL(dsn)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	c := cfg.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

func setup(ctx context.Context, o options, log *slog.Logger) (*env, error) {
	if isMySQL(o.db) {
		e := &env{o: o, log: log}
		if err := setupMySQL(ctx, o, e); err != nil {
			if e.my == nil {
				return nil, err
			}
			return e, err
		}
		return e, nil
	}
	poolCfg, err := pgxpool.ParseConfig(o.db)
	if err != nil {
		return nil, fmt.Errorf("parsing --db: %w", err)
	}
	poolCfg.ConnConfig.RuntimeParams["application_name"] = "herald-bench"
	e := &env{o: o, log: log, poolCfg: poolCfg}
	e.admin, err = e.newPool(ctx, 4)
	if err != nil {
		return nil, err
	}
	if err := e.admin.QueryRow(ctx, `SHOW server_version`).Scan(&e.pgVersion); err != nil {
		e.admin.Close()
		return nil, fmt.Errorf("reading the server version: %w", err)
	}

	var b [4]byte
	_, _ = rand.Read(b[:])
	e.schema = "herald_bench_" + hex.EncodeToString(b[:])
	e.pgCfg = &heraldpg.Config{Schema: e.schema, ClaimRows: o.claimRows}
	d, err := heraldpg.New(e.admin, e.pgCfg)
	if err != nil {
		e.admin.Close()
		return nil, err
	}
	e.outbox = d.Table()
	e.orders = `"` + e.schema + `"."orders"`
	// From here on close drops the schema, which Migrate creates.
	if err := d.Migrate(ctx); err != nil {
		return e, fmt.Errorf("creating the outbox table: %w", err)
	}
	if _, err := e.admin.Exec(ctx, `CREATE TABLE `+e.orders+` (
		id           bigint      PRIMARY KEY,
		customer_id  text        NOT NULL,
		amount_cents bigint      NOT NULL,
		status       text        NOT NULL,
		created_at   timestamptz NOT NULL DEFAULT now())`); err != nil {
		return e, fmt.Errorf("creating the orders table: %w", err)
	}
	if err := e.createMinimal(ctx); err != nil {
		return e, err
	}
	return e, nil
}

// newPool opens a pool of at most maxConns connections and checks it works.
func (e *env) newPool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg := e.poolCfg.Copy()
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	return pool, nil
}

// closePool closes a pool from newPool.
func (e *env) closePool(pool *pgxpool.Pool) {
	if e.beforePoolClose != nil {
		e.beforePoolClose()
	}
	pool.Close()
}

// closeDB closes a MySQL pool as closePool closes a PostgreSQL one.
func (e *env) closeDB(db *sql.DB) {
	if e.beforePoolClose != nil {
		e.beforePoolClose()
	}
	_ = db.Close()
}

// openStore returns the run's outbox store on a pool of its own of
// maxConns connections, and what closes the pool.
func (e *env) openStore(ctx context.Context, maxConns int) (herald.Store, func(), error) {
	if e.my != nil {
		return e.my.openStore(ctx, e, maxConns)
	}
	pool, err := e.newPool(ctx, maxConns)
	if err != nil {
		return nil, nil, err
	}
	d, err := e.newDriver(pool)
	if err != nil {
		e.closePool(pool)
		return nil, nil, err
	}
	return d, func() { e.closePool(pool) }, nil
}

// newDriver returns an outbox store on pool, in the run's schema.
func (e *env) newDriver(pool *pgxpool.Pool) (*heraldpg.Driver, error) {
	return heraldpg.New(pool, e.pgCfg)
}

// truncate empties the business and outbox tables.
func (e *env) truncate(ctx context.Context) error {
	if e.my != nil {
		return e.my.truncate(ctx, e)
	}
	if _, err := e.admin.Exec(ctx, `TRUNCATE `+e.orders+`, `+e.outbox); err != nil {
		return fmt.Errorf("truncating: %w", err)
	}
	return nil
}

// checkpoint flushes dirty pages so that each measurement starts from the
// same state. It needs superuser (or pg_checkpoint); without it, it does
// nothing.
func (e *env) checkpoint(ctx context.Context) {
	if e.my != nil {
		return // InnoDB has no statement for it
	}
	_, _ = e.admin.Exec(ctx, `CHECKPOINT`)
}

// countState counts the outbox rows in state, or every row for "".
func (e *env) countState(ctx context.Context, state string) (int, error) {
	if e.my != nil {
		return e.my.countState(ctx, e, state)
	}
	var n int
	err := e.admin.QueryRow(ctx, `SELECT count(*) FROM `+e.outbox+` WHERE state = $1 OR $1 = ''`, state).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting %s rows: %w", state, err)
	}
	return n, nil
}

// close stops NATS, drops the schema (unless --keep) and closes the pool.
// It runs even when ctx was cancelled.
func (e *env) close(out io.Writer) error {
	var errs []error
	if e.nats != nil {
		errs = append(errs, e.nats.close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.my != nil {
		if e.o.keep && e.schema != "" {
			fmt.Fprintf(out, "kept database %s (--keep)\n", e.schema)
		}
		errs = append(errs, e.my.close(ctx, e))
		return errors.Join(errs...)
	}
	if e.o.keep {
		fmt.Fprintf(out, "kept schema %s (--keep)\n", e.schema)
	} else if e.schema != "" {
		if _, err := e.admin.Exec(ctx, `DROP SCHEMA IF EXISTS "`+e.schema+`" CASCADE`); err != nil {
			errs = append(errs, fmt.Errorf("dropping schema %s: %w", e.schema, err))
		}
	}
	e.admin.Close()
	return errors.Join(errs...)
}

// natsEnv is the embedded JetStream server and the connections to it.
type natsEnv struct {
	srv     *server.Server
	dir     string
	version string
	// pub carries the relay's publishes; sub the consumer and admin calls,
	// so that receiving does not queue behind publishing on one socket.
	pub, sub *nats.Conn
	js       jetstream.JetStream // on sub
}

// Stream names and subjects. Each benchmark has its own stream so its
// message count is its own.
const (
	drainStream    = "HERALD_BENCH_DRAIN"
	drainSubject   = "herald.bench.drain"
	latencyStream  = "HERALD_BENCH_LATENCY"
	latencySubject = "herald.bench.latency"
)

func (e *env) startNATS(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "herald-bench-nats-")
	if err != nil {
		return fmt.Errorf("nats: store dir: %w", err)
	}
	n := &natsEnv{dir: dir, version: server.VERSION}
	e.nats = n // close removes dir from here on
	n.srv, err = server.NewServer(&server.Options{
		ServerName: "herald-bench",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	n.srv.Start()
	if !n.srv.ReadyForConnections(10 * time.Second) {
		return errors.New("nats: embedded server did not become ready within 10s")
	}
	if n.pub, err = nats.Connect(n.srv.ClientURL(), nats.Name("herald-bench-relay")); err != nil {
		return fmt.Errorf("nats: connecting: %w", err)
	}
	if n.sub, err = nats.Connect(n.srv.ClientURL(), nats.Name("herald-bench-consumer")); err != nil {
		return fmt.Errorf("nats: connecting: %w", err)
	}
	if n.js, err = jetstream.New(n.sub); err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	for _, s := range []struct{ name, subject string }{{drainStream, drainSubject}, {latencyStream, latencySubject}} {
		_, err := n.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:       s.name,
			Subjects:   []string{s.subject},
			Storage:    jetstream.FileStorage,
			Duplicates: 2 * time.Minute,
			// Allowing atomic batches changes nothing for other publishes.
			AllowAtomicPublish: e.o.natsAtomic,
		})
		if err != nil {
			return fmt.Errorf("nats: creating stream %s: %w", s.name, err)
		}
	}
	return nil
}

func (n *natsEnv) close() error {
	if n.pub != nil {
		n.pub.Close()
	}
	if n.sub != nil {
		n.sub.Close()
	}
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
	if err := os.RemoveAll(n.dir); err != nil {
		return fmt.Errorf("nats: removing store dir: %w", err)
	}
	return nil
}
