package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// heldWriter writes what trickle writes (haRows events, "kK:N", in
// transactions of haPerTx), and can be held between two transactions:
// while it is held no statement is in flight, so stopping the server
// leaves no commit in doubt, and every event is written exactly once.
type heldWriter struct {
	dsn     string
	mu      sync.Mutex // taken for each transaction, and by hold
	conn    *pgx.Conn
	written int  // events committed
	held    bool // by the test: its cleanup lets go
	done    chan struct{}
	err     error
}

func (w cdcWorld) heldTrickle(t *testing.T) *heldWriter {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), w.dsn)
	require.NoError(t, err)
	hw := &heldWriter{dsn: w.dsn, conn: conn, done: make(chan struct{})}
	go func() {
		defer close(hw.done)
		for from := 1; from <= haRows; from += haPerTx {
			hw.mu.Lock()
			_, err := hw.conn.Exec(context.Background(), fmt.Sprintf(`INSERT INTO herald_outbox (topic, key, payload)
				SELECT 'cdc.orders', 'k' || (g %% %d), convert_to('k' || (g %% %d) || ':' || g, 'UTF8')
				FROM generate_series($1::int, $2::int) g`, haKeys, haKeys), from, from+haPerTx-1)
			if err == nil {
				hw.written += haPerTx
			}
			hw.mu.Unlock()
			if err != nil {
				hw.err = err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		if hw.held {
			// The test failed while it held the writer: let it end.
			hw.held = false
			hw.mu.Unlock()
		}
		<-hw.done
		_ = hw.conn.Close(context.Background())
	})
	return hw
}

// hold waits for the transaction in flight and keeps the writer from
// starting another; it returns the events committed so far.
func (hw *heldWriter) hold() int {
	hw.mu.Lock()
	hw.held = true
	return hw.written
}

// release lets the writer go on, on a new connection: the server was
// restarted meanwhile.
func (hw *heldWriter) release(t *testing.T) {
	t.Helper()
	defer func() { hw.held = false; hw.mu.Unlock() }()
	_ = hw.conn.Close(context.Background())
	conn, err := pgx.Connect(context.Background(), hw.dsn)
	require.NoError(t, err)
	hw.conn = conn
}

func (hw *heldWriter) wait() error {
	<-hw.done
	return hw.err
}

// PostgreSQL is restarted (a fast shutdown, then a start on the same
// data) while a CDC relay streams a steady trickle of transactions. The
// relay does not exit: it waits for the server, reopens the slot from its
// confirmed position and goes on with what is written after the restart.
// Every event is delivered, each key's in commit order; what the relay
// had published and not confirmed when the server went comes again, and
// JetStream drops it by its Nats-Msg-Id. Nothing failed, so nothing was
// written back to the table.
func TestCDCRelayResumesAfterPostgreSQLRestartsMidStream(t *testing.T) {
	testenv.Long(t)
	w := newCDCWorld(t)
	addr := freeAddr(t)
	relay := startChild(t, "relay", "--db", w.dsn, "--publisher", w.nats.URL(), "--source", "cdc",
		"--batch-size", haBatchSize, "--cdc-create-slot", "--admin-addr", addr)
	require.Eventually(t, func() bool { return strings.Contains(w.insertState(t), "streamed") },
		60*time.Second, 20*time.Millisecond, "the relay makes inserts streamed once its slot exists:\n%s", relay.out)
	writer := w.heldTrickle(t)

	require.Eventually(t, func() bool { return w.messages(t) >= 3000 }, 2*time.Minute, 5*time.Millisecond,
		"the relay publishes:\n%s", relay.out)
	committed := writer.hold()
	published := w.messages(t)
	require.Less(t, committed, haRows, "restarted midway through the writes, not after them")
	t.Logf("restarting PostgreSQL: %d events committed, %d published", committed, published)
	down := time.Now()
	w.pc.Stop(t)
	// A fast shutdown waits for each walsender to see everything it sent
	// confirmed. The relay cannot confirm what needs the database to be
	// settled, so it must end its replication connection when the server
	// shuts down; else the server waits, and Stop kills it after 30s.
	require.Less(t, time.Since(down), 25*time.Second,
		"PostgreSQL's fast shutdown waited for the relay's replication connection:\n%s", relay.out)
	t.Logf("PostgreSQL stopped in %s", time.Since(down))
	// Down long enough for the relay to fail to reconnect, and back off.
	time.Sleep(2 * time.Second)
	w.pc.Start(t)
	t.Logf("PostgreSQL was down for %s", time.Since(down))
	writer.release(t)

	require.NoError(t, writer.wait())
	require.Eventually(t, func() bool { return w.messages(t) >= haRows }, 3*time.Minute, 50*time.Millisecond,
		"the relay delivers what was written before and after the restart:\n%s", relay.out)
	require.Contains(t, relay.out.String(), "change stream reconnected", "the relay reopened the slot")
	require.Eventually(t, func() bool {
		code, rj := readiness(t, addr)
		return code == 200 && len(rj.Databases) == 1 && rj.Databases[0].CDC == cdcActive
	}, 30*time.Second, 20*time.Millisecond, "the relay is ready again, streaming the slot:\n%s", relay.out)
	require.Equal(t, "1", readerActive(t, addr), "herald_cdc_reader_active")

	require.Equal(t, 0, relay.stop(t), "the relay ran on until SIGTERM:\n%s", relay.out)
	require.EqualValues(t, haRows, w.messages(t), "the redelivered events were dropped by their ids")
	requireEachEventOnceInKeyOrder(t, w.payloads(t))

	db, err := pgx.Connect(context.Background(), w.dsn)
	require.NoError(t, err)
	defer db.Close(context.Background())
	var pending int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT count(*) FROM herald_outbox WHERE state <> 'streamed'`).Scan(&pending))
	require.Zero(t, pending, "nothing failed, so nothing was written back to the table")
}
