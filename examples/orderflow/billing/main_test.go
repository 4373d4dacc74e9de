package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is billing on a fresh, migrated schema.
type fixture struct {
	pool   *pgxpool.Pool
	schema string
	b      *billing
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	b, err := newBilling(pool, schema, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, b.migrate(context.Background()))
	return &fixture{pool: pool, schema: schema, b: b}
}

// invoices returns the amounts invoiced for an order.
func (f *fixture) invoices(t *testing.T, orderID string) []int64 {
	t.Helper()
	rows, err := f.pool.Query(context.Background(),
		fmt.Sprintf(`SELECT amount_cents FROM %s.invoices WHERE order_id = $1`, f.schema), orderID)
	require.NoError(t, err)
	var out []int64
	for rows.Next() {
		var a int64
		require.NoError(t, rows.Scan(&a))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(context.Background(),
		fmt.Sprintf(`SELECT count(*) FROM %s.%s`, f.schema, table)).Scan(&n))
	return n
}

func (f *fixture) exec(t *testing.T, sql string) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), fmt.Sprintf(sql, f.schema))
	require.NoError(t, err)
}

// placed is an order.placed event as the orders service writes it.
func placed(orderID string, total int64) herald.Message {
	return herald.Message{
		ID:            herald.NewID(),
		Topic:         "orders.placed",
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   orderID,
		Payload:       fmt.Appendf(nil, `{"id": %q, "customer": "Ada", "total_cents": %d}`, orderID, total),
	}
}

func TestHandlingAnEventTwiceWritesOneInvoice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OneAfterTheOther", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		order := uuid.NewString()
		ev := placed(order, 2100)

		processed, err := f.b.handle(ctx, ev)
		require.NoError(t, err)
		require.True(t, processed)
		processed, err = f.b.handle(ctx, ev)
		require.NoError(t, err)
		require.False(t, processed, "a redelivered event was processed again")
		require.Equal(t, []int64{2100}, f.invoices(t, order))

		// Another event about the same order is another invoice: the inbox
		// is keyed by the event, not by the order.
		processed, err = f.b.handle(ctx, placed(order, 300))
		require.NoError(t, err)
		require.True(t, processed)
		require.ElementsMatch(t, []int64{2100, 300}, f.invoices(t, order))
	})

	t.Run("AtTheSameMoment", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		order := uuid.NewString()
		ev := placed(order, 999)
		const deliveries = 8
		results := make(chan error, deliveries)
		var processed sync.Map
		for i := range deliveries {
			go func() {
				p, err := f.b.handle(ctx, ev)
				processed.Store(i, p)
				results <- err
			}()
		}
		for range deliveries {
			require.NoError(t, <-results)
		}
		n := 0
		processed.Range(func(_, p any) bool {
			if p.(bool) {
				n++
			}
			return true
		})
		require.Equal(t, 1, n, "concurrent deliveries of one event: exactly one processes it")
		require.Equal(t, []int64{999}, f.invoices(t, order))
	})
}

// A failure inside the transaction leaves neither an invoice nor an inbox
// record, so the redelivery processes the event.
func TestAFailedAttemptLeavesNothingAndTheRetryInvoices(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	order := uuid.NewString()
	ev := placed(order, 4200)

	f.exec(t, `ALTER TABLE %s.invoices RENAME TO invoices_away`)
	processed, err := f.b.handle(ctx, ev)
	require.Error(t, err)
	require.NotErrorIs(t, err, errMalformed, "a database failure must be retried, not dropped")
	require.False(t, processed)
	require.Zero(t, f.count(t, "herald_inbox"), "the inbox recorded an event whose handler failed")

	f.exec(t, `ALTER TABLE %s.invoices_away RENAME TO invoices`)
	processed, err = f.b.handle(ctx, ev)
	require.NoError(t, err)
	require.True(t, processed)
	require.Equal(t, []int64{4200}, f.invoices(t, order))
	require.Equal(t, 1, f.count(t, "herald_inbox"))
}

func TestMalformedEventsAreRefusedAndWriteNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for name, payload := range map[string]string{
		"NotJSON":          `not json`,
		"IDNotAUUID":       `{"id": "42", "total_cents": 1}`,
		"MissingTotal":     `{"id": "` + uuid.NewString() + `"}`,
		"NegativeTotal":    `{"id": "` + uuid.NewString() + `", "total_cents": -1}`,
		"TotalNotANumber":  `{"id": "` + uuid.NewString() + `", "total_cents": "1"}`,
		"PayloadNotObject": `[1, 2]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev := placed(uuid.NewString(), 1)
			ev.Payload = []byte(payload)
			processed, err := f.b.handle(context.Background(), ev)
			require.ErrorIs(t, err, errMalformed)
			require.False(t, processed)
			require.Zero(t, f.count(t, "invoices"))
			require.Zero(t, f.count(t, "herald_inbox"))
		})
	}
}

// publish puts ev on the stream as the relay does, except that it sets no
// Nats-Msg-Id: the stream then keeps a second copy of an event instead of
// dropping it, as happens when the relay republishes after the stream's
// duplicate window.
func publish(t *testing.T, js jetstream.JetStream, ev herald.Message) {
	t.Helper()
	h := nats.Header{}
	h.Set(herald.HeaderID, ev.ID)
	h.Set(herald.HeaderType, ev.Type)
	h.Set(herald.HeaderAggregateType, ev.AggregateType)
	h.Set(herald.HeaderAggregateID, ev.AggregateID)
	_, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: ev.Topic, Header: h, Data: ev.Payload})
	require.NoError(t, err)
}

// startConsumer runs b.consume on a consumer of cfg until the test ends.
func startConsumer(t *testing.T, b *billing, stream jetstream.Stream, cfg jetstream.ConsumerConfig) jetstream.Consumer {
	t.Helper()
	cons, err := stream.CreateOrUpdateConsumer(context.Background(), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.consume(ctx, cons) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return cons
}

// settled reports whether the consumer has acknowledged (or terminated)
// every message of the stream, after at least minDeliveries deliveries.
func settled(t *testing.T, cons jetstream.Consumer, stream jetstream.Stream, minDeliveries uint64) bool {
	ctx := context.Background()
	si, err := stream.Info(ctx)
	require.NoError(t, err)
	ci, err := cons.Info(ctx)
	require.NoError(t, err)
	return ci.NumPending == 0 && ci.NumAckPending == 0 &&
		ci.AckFloor.Stream == si.State.LastSeq && ci.Delivered.Consumer >= minDeliveries
}

// The consumer loop acks duplicates without a second invoice, terminates
// what is not a Herald event, and naks a failure so that its redelivery
// succeeds; a replay of the whole stream changes nothing.
func TestConsumerSettlesEveryDeliveryAndInvoicesOncePerEvent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.b.nakDelay = 20 * time.Millisecond
	ns := testenv.NATS(t)
	js, err := jetstream.New(ns.Conn(t))
	require.NoError(t, err)
	stream, err := ensureStream(context.Background(), js)
	require.NoError(t, err)
	cons := startConsumer(t, f.b, stream, consumerConfig())

	order1 := uuid.NewString()
	ev1 := placed(order1, 1500)
	publish(t, js, ev1)
	publish(t, js, ev1) // a republished duplicate
	_, err = js.Publish(context.Background(), "orders.placed", []byte(`{"not": "herald"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return settled(t, cons, stream, 3) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []int64{1500}, f.invoices(t, order1))

	// The database fails for a while: the event is nak'ed and redelivered
	// until it goes through.
	f.exec(t, `ALTER TABLE %s.invoices RENAME TO invoices_away`)
	order2 := uuid.NewString()
	publish(t, js, placed(order2, 700))
	require.Eventually(t, func() bool {
		ci, err := cons.Info(context.Background())
		require.NoError(t, err)
		return ci.Delivered.Consumer >= 6 // the first delivery and two redeliveries
	}, 10*time.Second, 10*time.Millisecond)
	f.exec(t, `ALTER TABLE %s.invoices_away RENAME TO invoices`)
	require.Eventually(t, func() bool { return settled(t, cons, stream, 6) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []int64{700}, f.invoices(t, order2))

	// billing --replay: every event is delivered again and skipped.
	replay := startConsumer(t, f.b, stream, replayConfig())
	require.Eventually(t, func() bool { return settled(t, replay, stream, 4) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []int64{1500}, f.invoices(t, order1))
	require.Equal(t, []int64{700}, f.invoices(t, order2))
	require.Equal(t, 2, f.count(t, "herald_inbox"))
}

// startOrders builds the orders service and runs it on a free port until
// the test ends. It returns the service's base URL.
func startOrders(t *testing.T, dsn, schema string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "orders")
	out, err := exec.Command("go", "build", "-o", bin, "../orders").CombinedOutput()
	require.NoError(t, err, "building the orders service: %s", out)

	logs := &testenv.LogBuffer{}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--db", dsn, "--schema", schema)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			require.NoError(t, err, "orders did not shut down cleanly: %s", logs)
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited //nolint:errcheck // killed: its exit error says only that
			t.Errorf("orders ignored SIGTERM: %s", logs)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("orders log:\n%s", logs)
		}
	})

	listening := regexp.MustCompile(`msg="orders service listening" addr=(\S+)`)
	var addr string
	require.Eventually(t, func() bool {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			require.FailNow(t, "orders exited", "%v: %s", err, logs)
		default:
		}
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, 60*time.Second, 10*time.Millisecond)
	return "http://" + addr
}

// The whole flow: the orders service (the real binary) commits an order and
// its event; a Herald relay publishes the event to JetStream; billing (its
// run function, as main calls it) invoices it.
func TestEndToEndAnOrderIsInvoicedOnce(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to build the orders service")
	}
	ctx := context.Background()
	dsn := testenv.PostgresDSN(t)
	schema := testenv.Schema(t)
	ns := testenv.NATS(t)
	pool := testenv.PostgresPool(t)

	ordersURL := startOrders(t, dsn, schema) // migrates the orders and outbox tables

	// The relay, configured as `herald relay --nats-create-stream ORDERS
	// --nats-stream-subjects 'orders.>'` does.
	store, err := heraldpg.New(pool, &heraldpg.Config{Schema: schema})
	require.NoError(t, err)
	pub, err := heraldnats.New(ns.Conn(t), &heraldnats.Config{
		CreateStream: &jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute},
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub,
		IdlePollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })

	billingCtx, stopBilling := context.WithCancel(ctx)
	billingLogs := &testenv.LogBuffer{}
	billingDone := make(chan error, 1)
	go func() {
		billingDone <- run(billingCtx, []string{"--db", dsn, "--schema", schema, "--nats", ns.URL()}, billingLogs)
	}()
	t.Cleanup(func() {
		stopBilling()
		require.NoError(t, <-billingDone, "billing: %s", billingLogs)
		if t.Failed() {
			t.Logf("billing log:\n%s", billingLogs)
		}
	})

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(body string) (int, map[string]any) {
		resp, err := client.Post(ordersURL+"/orders", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}

	status, bad := post(`{"customer": "Ada", "items": [{"sku": "tea", "quantity": 0, "price_cents": 450}]}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "items[0].quantity: must be greater than 0", bad["error"])

	status, created := post(`{"customer": "Ada", "items": [{"sku": "tea", "quantity": 2, "price_cents": 450}, {"sku": "cup", "quantity": 1, "price_cents": 1200}]}`)
	require.Equal(t, http.StatusCreated, status, created)
	orderID := created["id"].(string)
	require.EqualValues(t, 2100, created["total_cents"])

	var amount int64
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT amount_cents FROM %s.invoices WHERE order_id = $1`, schema), orderID).Scan(&amount)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "no invoice")
	require.EqualValues(t, 2100, amount)

	var invoices, orders int
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT
		(SELECT count(*) FROM %[1]s.invoices), (SELECT count(*) FROM %[1]s.orders)`, schema)).Scan(&invoices, &orders))
	require.Equal(t, 1, invoices)
	require.Equal(t, 1, orders, "the refused order was written")
	// The relay marks the row published once the PubAck is in, which may
	// come after billing has already invoiced.
	require.Eventually(t, func() bool {
		var state string
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT state FROM %s.herald_outbox`, schema)).Scan(&state))
		return state == "published"
	}, 10*time.Second, 10*time.Millisecond)
}
