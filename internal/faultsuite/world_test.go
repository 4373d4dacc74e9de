package faultsuite_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The events of every case: one topic, keys owned by one producer each, so
// that a key's commit order is its sequence order.
const (
	topic         = "fault.orders"
	streamSubject = "fault.>"
	// relayHeader names the relay that published a message, set by the
	// child relays' publisher so that a duplicate can be traced to the
	// relay that was killed.
	relayHeader = "Fault-Relay"
)

// world is one case's setting: an outbox with a business table beside it,
// a JetStream server whose stream captures the events, and a tap that sees
// every message published, duplicates included.
type world struct {
	// db is the outbox's database as the cases every database shares
	// see it; the fields below it up to nats are PostgreSQL's, for the
	// cases that run on PostgreSQL only (zero on MySQL).
	db     outboxDB
	dsn    string        // PostgreSQL, directly
	pool   *pgxpool.Pool // the test's own view, never through a proxy
	cfg    *heraldpg.Config
	store  *heraldpg.Driver
	writer *herald.Writer[pgx.Tx]
	orders string // the business table, qualified
	nats   *testenv.NATSServer
	stream jetstream.Stream
	tap    *tap
	ledger ledger
	// foreign are the ids of events other programs wrote with plain SQL:
	// no business row stands beside them, and some rightly end dead or
	// never due. verify leaves them out of the one-to-one check, the drain
	// and the lost count (by id, nothing else); the case that wrote them
	// checks what became of each.
	foreign []string
}

// newWorld builds a world on the shared PostgreSQL server, in a schema of
// its own.
func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldOn(t, testenv.PostgresDSN(t), testenv.Schema(t))
}

// newWorldOn builds a world in schema (which must exist) of the database
// at dsn.
func newWorldOn(t *testing.T, dsn, schema string) *world {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg := &heraldpg.Config{Schema: schema}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	writer, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	orders := `"` + schema + `".orders`
	_, err = pool.Exec(ctx, `CREATE TABLE `+orders+` (id text PRIMARY KEY, key text NOT NULL)`)
	require.NoError(t, err)

	w := &world{dsn: dsn, pool: pool, cfg: cfg, store: store, writer: writer, orders: orders,
		ledger: ledger{committedAt: map[string]time.Time{}}}
	w.db = &pgDB{w: w}
	w.startBroker(t)
	return w
}

// startBroker starts the world's JetStream server, its stream and its
// tap.
func (w *world) startBroker(t *testing.T) {
	t.Helper()
	w.nats = testenv.NATS(t)
	w.stream = w.nats.CreateStream(t, "FAULT", streamSubject)
	w.tap = startTap(t, w.nats.Conn(t))
}

// outboxDB is the outbox's database, as the cases that run on every
// database see it: how a producer writes, what the outbox and the business
// table hold, and a store for a relay.
type outboxDB interface {
	// orderTx runs one producer transaction: fn writes orders by write
	// (a business row and its event each); it commits unless rollback or
	// fn failed. An error from the commit leaves its outcome unknown.
	orderTx(ctx context.Context, rollback bool, fn func(write func(id, key string) (herald.Message, error)) error) error
	// states counts the outbox rows, those of foreign aside: all of them,
	// and the ready, claimed and dead ones.
	states(ctx context.Context, foreign []string) (total, ready, claimed, dead int, err error)
	published(ctx context.Context) (int, error)
	outboxRows(ctx context.Context) ([]outboxRow, error)
	businessRows(ctx context.Context) ([]string, error)
	// addr is the server's host:port, for a proxy's target.
	addr(t *testing.T) string
	// relayStore is a store for a relay named name, reaching the server
	// at addr (a proxy's) instead when addr is not empty, closed when the
	// test ends.
	relayStore(t *testing.T, name, addr string) herald.Store
}

// pgDB is a PostgreSQL world's outboxDB.
type pgDB struct{ w *world }

func (p *pgDB) orderTx(ctx context.Context, rollback bool, fn func(write func(id, key string) (herald.Message, error)) error) error {
	tx, err := p.w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	err = fn(func(id, key string) (herald.Message, error) {
		return writeOrder(ctx, tx, p.w.writer, p.w.orders, id, key)
	})
	if err != nil || rollback {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

func (p *pgDB) states(ctx context.Context, foreign []string) (total, ready, claimed, dead int, err error) {
	// Never nil: <> ALL of NULL would leave every row out.
	foreign = append([]string{}, foreign...)
	err = p.w.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'ready'),
		count(*) FILTER (WHERE state = 'claimed'), count(*) FILTER (WHERE state = 'dead')
		FROM `+p.w.store.Table()+` WHERE id::text <> ALL($1::text[])`, foreign).Scan(&total, &ready, &claimed, &dead)
	return total, ready, claimed, dead, err
}

func (p *pgDB) published(ctx context.Context) (int, error) {
	var n int
	err := p.w.pool.QueryRow(ctx, `SELECT count(*) FROM `+p.w.store.Table()+` WHERE state = 'published'`).Scan(&n)
	return n, err
}

func (p *pgDB) outboxRows(ctx context.Context) ([]outboxRow, error) {
	rows, err := p.w.pool.Query(ctx, `SELECT id::text, key, aggregate_id, state, seq FROM `+p.w.store.Table()+` ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		return o, r.Scan(&o.id, &o.key, &o.aggregateID, &o.state, &o.seq)
	})
}

func (p *pgDB) businessRows(ctx context.Context) ([]string, error) {
	rows, err := p.w.pool.Query(ctx, `SELECT id FROM `+p.w.orders)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (p *pgDB) addr(t *testing.T) string { return p.w.pgAddr(t) }

func (p *pgDB) relayStore(t *testing.T, name, addr string) herald.Store {
	t.Helper()
	store, err := heraldpg.New(p.w.relayPool(t, name, addr), p.w.cfg)
	require.NoError(t, err)
	return store
}

// natsURL is the JetStream server's address, for a client that reaches it
// without a proxy.
func (w *world) natsURL() string { return w.nats.URL() }

// natsAddr is the JetStream server's host:port, for a proxy's target.
func (w *world) natsAddr() string { return w.nats.URL()[len("nats://"):] }

// pgAddr is the PostgreSQL server's host:port, for a proxy's target.
func (w *world) pgAddr(t *testing.T) string {
	t.Helper()
	c, err := pgxpool.ParseConfig(w.dsn)
	require.NoError(t, err)
	return net.JoinHostPort(c.ConnConfig.Host, strconv.Itoa(int(c.ConnConfig.Port)))
}

// relayPool opens a pool for a relay, named name in pg_stat_activity, to
// addr (host:port: a proxy) instead of the server when addr is not empty.
// It is closed when the test ends.
func (w *world) relayPool(t *testing.T, name, addr string) *pgxpool.Pool {
	t.Helper()
	c, err := pgxpool.ParseConfig(w.dsn)
	require.NoError(t, err)
	c.ConnConfig.RuntimeParams["application_name"] = name
	c.ConnConfig.ConnectTimeout = 2 * time.Second
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		c.ConnConfig.Host, c.ConnConfig.Port = host, uint16(p)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), c)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// message is the event every producer writes for business row id: the
// business id rides as the aggregate id and the payload, so that events
// and business rows can be matched one to one.
func message(id, key string) herald.Message {
	return herald.Message{
		ID: herald.NewID(), Topic: topic, Key: key,
		AggregateType: "order", AggregateID: id, Payload: []byte(id),
	}
}

// writeOrder writes business row id and its event in tx, the way a
// service does: both or neither.
func writeOrder(ctx context.Context, tx pgx.Tx, w *herald.Writer[pgx.Tx], orders, id, key string) (herald.Message, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO `+orders+` (id, key) VALUES ($1, $2)`, id, key); err != nil {
		return herald.Message{}, err
	}
	m := message(id, key)
	return m, w.WriteTx(ctx, tx, m)
}

// ledger is what the in-process producers know of their transactions: the
// business ids whose commit succeeded and those they rolled back on
// purpose (with their events' ids). A commit that failed has an unknown
// outcome and is in neither.
type ledger struct {
	mu           sync.Mutex
	committed    []string
	rolledBack   []string
	rolledBackEv []string
	// committedAt is when each committed event's commit returned, by
	// event id.
	committedAt map[string]time.Time
}

// load is what in-process producers write: orders (a business row and its
// event each) over keys keys, perTx orders per transaction, from writers
// goroutines, each owning its keys.
type load struct {
	writers, keys, perTx int
	// total is how many orders to commit; 0 means until ctx ends.
	total int
	// pace is a pause after each transaction, so that a load that runs
	// until ctx ends writes a few thousand events, not as many as the
	// machine can.
	pace time.Duration
}

// produce commits orders as l says, and rolls back every tenth transaction
// on purpose: events no relay may ever publish. Failed transactions (the
// database is away) are retried with new ids. It returns once l.total
// orders committed, or ctx ended.
func (w *world) produce(ctx context.Context, l load) {
	var wg sync.WaitGroup
	for p := range l.writers {
		wg.Go(func() { w.producer(ctx, p, l) })
	}
	wg.Wait()
}

// startLoad runs produce in the background; the function it returns ends
// the load (when it runs until ctx ends) and waits for it.
func (w *world) startLoad(t *testing.T, l load) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.produce(ctx, l)
	}()
	stop = sync.OnceFunc(func() {
		if l.total == 0 {
			cancel()
		}
		<-done
		cancel()
	})
	t.Cleanup(stop)
	return stop
}

func (w *world) producer(ctx context.Context, p int, l load) {
	n, seq := 0, 0
	for (l.total == 0 || n < l.total/l.writers) && ctx.Err() == nil {
		seq++
		rollback := seq%10 == 0
		var ids, events []string
		err := w.db.orderTx(ctx, rollback, func(write func(id, key string) (herald.Message, error)) error {
			for i := range l.perTx {
				id := fmt.Sprintf("w%d-%d-%d", p, seq, i)
				key := fmt.Sprintf("k%03d", p+l.writers*((seq+i)%(l.keys/l.writers)))
				m, err := write(id, key)
				if err != nil {
					return err
				}
				ids, events = append(ids, id), append(events, m.ID)
			}
			return nil
		})
		committedAt := time.Now()
		wait := l.pace
		switch {
		case err == nil && rollback:
			w.ledger.mu.Lock()
			w.ledger.rolledBack = append(w.ledger.rolledBack, ids...)
			w.ledger.rolledBackEv = append(w.ledger.rolledBackEv, events...)
			w.ledger.mu.Unlock()
		case err == nil:
			w.ledger.mu.Lock()
			w.ledger.committed = append(w.ledger.committed, ids...)
			for _, ev := range events {
				w.ledger.committedAt[ev] = committedAt
			}
			w.ledger.mu.Unlock()
			n += len(ids)
		default:
			// The database is away (a restart, a cut connection): try
			// again shortly with new ids; the commit may have happened.
			wait = max(wait, 20*time.Millisecond)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

// published counts the outbox rows published so far; -1 on an error, so
// that a poll during a database restart goes on.
func (w *world) published(t *testing.T) int {
	t.Helper()
	n, err := w.db.published(t.Context())
	if err != nil {
		return -1
	}
	return n
}

// count counts the outbox rows matching where, a condition in
// PostgreSQL's SQL. Errors count as -1, so that a poll during a database restart goes on.
func (w *world) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+w.store.Table()+` WHERE `+where, args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

// heldBy counts the events relay holds: rows it claimed, and the ready
// events of the keys it leased (heraldpg's default for a key of which a
// claim takes two events or more). -1 when the count fails.
func (w *world) heldBy(t *testing.T, relay string) int {
	t.Helper()
	table := w.store.Table()
	leases := strings.TrimSuffix(table, `"`) + `_leases"`
	var n int
	err := w.pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM `+table+` WHERE state = 'claimed' AND claimed_by = $1)
		+ (SELECT count(*) FROM `+leases+` l JOIN `+table+` o ON o.state = 'ready' AND o.topic = l.topic
		   AND o.key = l.key AND o.seq BETWEEN l.first_seq AND l.last_seq WHERE l.owner = $1)`, relay).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}

// leaseEndOf is when the first of relay's claims ends: of the rows it
// claimed and the keys it leased.
func (w *world) leaseEndOf(t *testing.T, relay string) time.Time {
	t.Helper()
	table := w.store.Table()
	leases := strings.TrimSuffix(table, `"`) + `_leases"`
	var end time.Time
	require.NoError(t, w.pool.QueryRow(t.Context(), `SELECT least(
		(SELECT min(lease_until) FROM `+table+` WHERE state = 'claimed' AND claimed_by = $1),
		(SELECT min(lease_until) FROM `+leases+` WHERE owner = $1))`, relay).Scan(&end))
	return end
}

// tap is a plain NATS subscription on the stream's subjects: it receives
// every message a relay publishes, including those JetStream drops as
// duplicates, so it counts what the relays sent.
type tap struct {
	sub *nats.Subscription

	mu      sync.Mutex
	order   []string             // event ids in arrival order
	relays  map[string][]string  // event id -> publishing relays, in order
	firstAt map[string]time.Time // event id -> when it first arrived
}

func startTap(t *testing.T, nc *nats.Conn) *tap {
	t.Helper()
	tp := &tap{relays: map[string][]string{}, firstAt: map[string]time.Time{}}
	sub, err := nc.Subscribe(streamSubject, func(m *nats.Msg) {
		id, at := m.Header.Get(herald.HeaderID), time.Now()
		tp.mu.Lock()
		defer tp.mu.Unlock()
		if _, ok := tp.firstAt[id]; !ok {
			tp.firstAt[id] = at
		}
		tp.order = append(tp.order, id)
		tp.relays[id] = append(tp.relays[id], m.Header.Get(relayHeader))
	})
	require.NoError(t, err)
	// Unlimited: a tap that dropped messages would hide duplicates.
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	require.NoError(t, nc.Flush())
	tp.sub = sub
	return tp
}

// seen returns, per event id, how many times it was published and by
// which relays, and the total number of messages.
func (tp *tap) seen(t *testing.T) (relays map[string][]string, total int) {
	t.Helper()
	dropped, err := tp.sub.Dropped()
	require.NoError(t, err)
	require.Zero(t, dropped, "the tap lost messages: duplicates would go unseen")
	tp.mu.Lock()
	defer tp.mu.Unlock()
	relays = make(map[string][]string, len(tp.relays))
	for id, rs := range tp.relays {
		relays[id] = append([]string(nil), rs...)
	}
	return relays, len(tp.order)
}
