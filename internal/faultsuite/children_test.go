package faultsuite_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// Relays and producers that a case kills for real run as child processes:
// this test binary, re-executed with HERALD_FAULT_CHILD set, which TestMain
// checks first (the pattern of driver/heraldpg/order_test.go).
const (
	childEnv       = "HERALD_FAULT_CHILD" // "relay" or "producer"
	childNameEnv   = "HERALD_FAULT_NAME"  // owner and application_name
	childDSNEnv    = "HERALD_FAULT_DSN"
	childSchemaEnv = "HERALD_FAULT_SCHEMA"
	childNATSEnv   = "HERALD_FAULT_NATS"
)

// runChildIfAsked runs a child's part until SIGTERM and exits the process,
// when this process was started as a child.
func runChildIfAsked() {
	var run func(ctx context.Context, name string) error
	switch os.Getenv(childEnv) {
	case "":
		return
	case "relay":
		run = runRelayChild
	case "producer":
		run = runProducerChild
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", childEnv, os.Getenv(childEnv))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	err := run(ctx, os.Getenv(childNameEnv))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childPool opens a pool named name in pg_stat_activity.
func childPool(ctx context.Context, name string, maxConns int32) (*pgxpool.Pool, error) {
	c, err := pgxpool.ParseConfig(os.Getenv(childDSNEnv))
	if err != nil {
		return nil, err
	}
	c.ConnConfig.RuntimeParams["application_name"] = name
	if maxConns > 0 {
		c.MaxConns = maxConns
	}
	return pgxpool.NewWithConfig(ctx, c)
}

// runRelayChild runs a relay with the suite's timings until ctx ends.
func runRelayChild(ctx context.Context, name string) error {
	pool, err := childPool(ctx, name, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := heraldpg.New(pool, &heraldpg.Config{Schema: os.Getenv(childSchemaEnv)})
	if err != nil {
		return err
	}
	nc, err := nats.Connect(os.Getenv(childNATSEnv), natsOptions(name)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pub, err := heraldnats.New(nc, &heraldnats.Config{AckTimeout: 2 * publishTimeout, Logger: log})
	if err != nil {
		return err
	}
	relay, err := herald.NewRelay(relayConfig(store, tagged{Publisher: pub, relay: name}, name, log))
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return relay.Stop(stopCtx)
}

// tagged names the publishing relay in a header of every message, so that
// the test can tell which relay sent each copy of a duplicate.
type tagged struct {
	herald.Publisher
	relay string
}

func (p tagged) Publish(ctx context.Context, batch []herald.Envelope) error {
	out := make([]herald.Envelope, len(batch))
	for i, env := range batch {
		env.Headers = maps.Clone(env.Headers)
		if env.Headers == nil {
			env.Headers = map[string]string{}
		}
		env.Headers[relayHeader] = p.relay
		out[i] = env
	}
	return p.Publisher.Publish(ctx, out)
}

// runProducerChild commits orders one transaction at a time until ctx
// ends, holding each transaction open for a few milliseconds after writing
// the business row and its event, as a service doing more work in it
// would. It prints "b <id>" before each transaction and "c <id>" once its
// commit returned.
func runProducerChild(ctx context.Context, name string) error {
	pool, err := childPool(ctx, name, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg := &heraldpg.Config{Schema: os.Getenv(childSchemaEnv)}
	w, err := heraldpg.NewWriter(cfg)
	if err != nil {
		return err
	}
	orders := `"` + cfg.Schema + `".orders`
	// The statements run on a context of their own: SIGTERM ends the loop
	// between transactions, not in the middle of one.
	db := context.Background()
	for n := 0; ctx.Err() == nil; n++ {
		id := fmt.Sprintf("%s-%d", name, n)
		fmt.Printf("b %s\n", id)
		tx, err := pool.Begin(db)
		if err != nil {
			return err
		}
		if _, err := writeOrder(db, tx, w, orders, id, fmt.Sprintf("%s/k%d", name, n%5)); err != nil {
			_ = tx.Rollback(db)
			return err
		}
		time.Sleep(time.Millisecond + time.Duration(rand.IntN(5000))*time.Microsecond)
		if err := tx.Commit(db); err != nil {
			return err
		}
		fmt.Printf("c %s\n", id)
	}
	return nil
}

// child is a relay or producer process.
type child struct {
	name     string
	cmd      *exec.Cmd
	out, log *testenv.LogBuffer // stdout, stderr
}

// startChild starts a child of the given kind named name, on w's outbox,
// and kills it when the test ends if it is still running.
func (w *world) startChild(t *testing.T, kind, name string) *child {
	t.Helper()
	c := &child{name: name, out: &testenv.LogBuffer{}, log: &testenv.LogBuffer{}}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		childEnv+"="+kind,
		childNameEnv+"="+name,
		childDSNEnv+"="+w.dsn,
		childSchemaEnv+"="+w.cfg.Schema,
		childNATSEnv+"="+w.natsURL())
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.log
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	return c
}

// kill SIGKILLs the child and waits for it to be gone.
func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Kill())
	err := c.cmd.Wait()
	var exit *exec.ExitError
	require.Truef(t, errors.As(err, &exit), "%s: %v", c.name, err)
}

// stopAll asks the children to stop (SIGTERM), all at once, and waits
// until each exited cleanly.
func stopAll(t *testing.T, children []*child) {
	t.Helper()
	for _, c := range children {
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, c := range children {
		require.NoError(t, c.cmd.Wait(), "%s did not stop cleanly; its log:\n%s", c.name, c.log)
	}
}

func (c *child) String() string  { return c.log.String() }
func (c *child) logName() string { return c.name }
