package adminui_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/cmd/herald/internal/adminui"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/heraldtest"
)

// screenshotsEnv, set to 1, makes TestBrowser save the README's screenshots
// in docs/.
const screenshotsEnv = "HERALD_SCREENSHOTS"

// browserPath finds Chromium. Without it the test skips, except in CI.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	heraldtest.Unavailable(t, "no chromium or chromium-browser on PATH: install it (Debian: apt-get install -y chromium) to run the browser test")
	return ""
}

// recorder is a publisher that confirms every event, except those of the
// topics it refuses, which fail permanently (and hold back the later events
// of their key in the batch, as the Publisher contract asks).
type recorder struct {
	mu        sync.Mutex
	refuse    map[string]bool
	published map[string]time.Time
	order     []string
}

func newRecorder(refuse ...string) *recorder {
	r := &recorder{refuse: map[string]bool{}, published: map[string]time.Time{}}
	for _, topic := range refuse {
		r.refuse[topic] = true
	}
	return r
}

func (r *recorder) Publish(_ context.Context, batch []herald.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := make([]error, len(batch))
	failedKeys := map[string]bool{}
	failed := false
	for i, e := range batch {
		switch {
		case failedKeys[e.Topic+"\x00"+e.Key]:
			errs[i], failed = herald.ErrHeldBack, true
		case r.refuse[e.Topic]:
			errs[i], failed = herald.Permanent(errors.New(`broker rejected the event: <b>schema mismatch</b>, token=tok-9f8e7d`)), true
			failedKeys[e.Topic+"\x00"+e.Key] = true
		default:
			r.published[e.ID] = time.Now()
			r.order = append(r.order, e.ID)
		}
	}
	if failed {
		return &herald.BatchError{Errs: errs}
	}
	return nil
}

func (r *recorder) accept(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.refuse, topic)
}

func (r *recorder) has(ids ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if _, ok := r.published[id]; !ok {
			return false
		}
	}
	return true
}

func (r *recorder) publishedOrder() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// rate is the page's Config.Rate: events published in each of the last ten
// minutes.
func (r *recorder) rate() []adminui.RatePoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().Truncate(time.Minute)
	points := make([]adminui.RatePoint, 10)
	for i := range points {
		points[i].Minute = now.Add(time.Duration(i-9) * time.Minute)
	}
	for _, at := range r.published {
		if i := 9 - int(now.Sub(at.Truncate(time.Minute))/time.Minute); i >= 0 && i < 10 {
			points[i].Published++
		}
	}
	return points
}

// TestBrowser drives the page in headless Chromium against a running relay
// on the same SQLite outbox: a dead letter is found, inspected, requeued
// through its confirmation page, and really published.
func TestBrowser(t *testing.T) {
	t.Parallel()
	chromium := browserPath(t)
	rec := newRecorder("orders", "invoices")
	b := setup(t, testToken, func(c *adminui.Config) { c.Rate = rec.rate })

	relayLogs := &heraldtest.LogBuffer{}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: b.store, Publisher: rec, Owner: "adminui-browser-test",
		Logger:       slog.New(slog.NewTextHandler(relayLogs, nil)),
		PollInterval: 5 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond,
		// A dead invoice does not park its key; a dead order does.
		SkipDeadTopics: []string{"invoices"},
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, relay.Stop(ctx))
		if t.Failed() {
			t.Logf("relay logs:\n%s", relayLogs.String())
		}
	})

	// Twenty events go through; an order and an invoice die; two later
	// events of the order's key wait behind it; payments wait for later.
	var shipped []herald.Message
	for i := range 20 {
		shipped = append(shipped, herald.Message{Topic: "orders.shipped", Key: fmt.Sprintf("order-%d", i), Type: "order.shipped"})
	}
	shippedIDs := b.write(t, shipped...)
	require.Eventually(t, func() bool { return rec.has(shippedIDs...) }, 10*time.Second, 10*time.Millisecond)

	deadOrder := b.write(t, herald.Message{
		Topic: "orders", Key: "order-42", Type: "order.placed", AggregateType: "order", AggregateID: "42",
		Payload: []byte(`{"order":42,"note":"<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>"}`),
		Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	})[0]
	deadInvoice := b.write(t, herald.Message{Topic: "invoices", Key: "inv-7", Type: "invoice.issued", Payload: []byte{0x1f, 0x8b, 0x08, 0x00, 0xff}})[0]
	require.Eventually(t, func() bool {
		return b.state(t, deadOrder) == heraldadmin.StateDead && b.state(t, deadInvoice) == heraldadmin.StateDead
	}, 10*time.Second, 10*time.Millisecond)
	waiting := b.write(t, herald.Message{Topic: "orders", Key: "order-42", Type: "order.paid"},
		herald.Message{Topic: "orders", Key: "order-42", Type: "order.shipped"})
	later := time.Now().Add(time.Hour)
	b.write(t, herald.Message{Topic: "payments", Key: "p-1", AvailableAt: later}, herald.Message{Topic: "payments", Key: "p-2", AvailableAt: later})
	// The broker takes orders again; the dead one stays dead until requeued,
	// and its key stays parked.
	rec.accept("orders")

	srv := httptest.NewServer(b.ui)
	t.Cleanup(srv.Close)

	browserLogs := &heraldtest.LogBuffer{}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium),
			chromedp.WindowSize(1280, 900),
			chromedp.CombinedOutput(browserLogs),
		)...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		// Closes the browser and waits for its process, so that no
		// goroutine of chromedp outlives the test.
		if err := chromedp.Cancel(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("closing the browser: %v", err)
		}
		cancel()
		allocCancel()
		if t.Failed() {
			t.Logf("browser output:\n%s", browserLogs.String())
		}
	})
	require.NoError(t, chromedp.Do(ctx), "starting chromium")

	// Every step has a deadline of its own; the browser lives on ctx.
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, c := context.WithTimeout(ctx, 20*time.Second)
		defer c()
		require.NoError(t, chromedp.Do(sctx, steps...))
	}
	text := func(sel string) string {
		t.Helper()
		sctx, c := context.WithTimeout(ctx, 20*time.Second)
		defer c()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}
	eval := func(js string) any {
		t.Helper()
		sctx, c := context.WithTimeout(ctx, 20*time.Second)
		defer c()
		v, err := chromedp.Run(sctx, chromedp.Evaluate[any](js))
		require.NoError(t, err, js)
		return v
	}
	page := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.CSS(`body[data-page="` + name + `"]`))
	}
	screenshot := func(name string) {
		t.Helper()
		if os.Getenv(screenshotsEnv) != "1" {
			return
		}
		sctx, c := context.WithTimeout(ctx, 20*time.Second)
		defer c()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		dir := filepath.Join("..", "..", "..", "..", "docs")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}

	// Log in, land on the overview.
	do(chromedp.Navigate(srv.URL+"/"), page("overview"))
	require.Equal(t, "Log in to act", text("#login-link"))
	do(chromedp.Click(chromedp.ID("login-link")), page("login"),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("login-submit")), page("overview"))
	require.Equal(t, "2", text("#total-dead"))
	require.Equal(t, "1", text("#total-parked"))
	require.Equal(t, "4", text("#total-ready"), "two orders behind the parked key, two payments for later")
	require.Equal(t, "20", text("#rate-total"))
	screenshot("admin-overview.png")

	// The dead letters: both there; the script's select-all box works.
	do(chromedp.Click(chromedp.CSS(`a[href="/dead"]`)), page("dead"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+deadOrder+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+deadInvoice+`"]`)))
	do(chromedp.Click(chromedp.ID("select-all")))
	require.EqualValues(t, 2, eval(`document.querySelectorAll("input.pick:checked").length`))
	do(chromedp.Click(chromedp.ID("select-all")))
	require.EqualValues(t, 0, eval(`document.querySelectorAll("input.pick:checked").length`))

	// The order's page: its payload is shown as text, never run.
	do(chromedp.Click(chromedp.CSS(`a[href="/events/`+deadOrder+`"]`)), page("event"))
	require.Equal(t, "dead", text("#event-state"))
	require.Contains(t, text("#event-parked"), "order-42")
	require.Contains(t, text("#payload"), `<img src=x onerror=`)
	require.EqualValues(t, 0, eval(`document.querySelectorAll("#payload *").length`), "the payload made no element")
	require.NotEqual(t, "pwned", eval(`document.title`))
	require.Contains(t, text("#event-error"), "<b>schema mismatch</b>", "shown as text")
	require.NotContains(t, text("#event-error"), "tok-9f8e7d", "scrubbed")
	screenshot("admin-dead.png")

	// Requeue it, through the confirmation page.
	do(chromedp.Click(chromedp.ID("requeue")), page("confirm"))
	require.Contains(t, text("h1"), "Requeue 1 dead event?")
	require.Equal(t, heraldadmin.StateDead, b.state(t, deadOrder), "the confirmation page changed nothing")
	do(chromedp.Click(chromedp.ID("confirm")), page("result"))
	require.Equal(t, "Requeued 1 dead event", text("#result"))

	// The relay publishes it, then the two events its key held back.
	require.Eventually(t, func() bool { return rec.has(append(waiting, deadOrder)...) }, 10*time.Second, 10*time.Millisecond)
	order := rec.publishedOrder()
	require.Equal(t, []string{deadOrder, waiting[0], waiting[1]}, order[len(order)-3:], "in the key's order")

	do(chromedp.Click(chromedp.ID("back-to-dead")), page("dead"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+deadInvoice+`"]`)))
	require.Equal(t, false, eval(`document.querySelector('tr[data-id="`+deadOrder+`"]') !== null`), "gone from the dead letters")
	do(chromedp.Navigate(srv.URL+"/"), page("overview"))
	require.Equal(t, "1", text("#total-dead"))
	require.Equal(t, "0", text("#total-parked"))
	require.Equal(t, "23", text("#rate-total"), "the requeued event and the two behind it were published")
	do(chromedp.Navigate(srv.URL+"/events/"+deadOrder), page("event"))
	require.Equal(t, "published", text("#event-state"))

	lines := b.auditLines(t)
	require.Len(t, lines, 2)
	require.Equal(t, "login", lines[0]["action"])
	require.Equal(t, "requeue", lines[1]["action"])
	require.Equal(t, []any{deadOrder}, lines[1]["ids"])
	require.InDelta(t, 1, lines[1]["changed"], 0)
}
