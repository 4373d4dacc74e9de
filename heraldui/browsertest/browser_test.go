package browsertest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
	"github.com/herald-outbox/herald/internal/testenv"
)

// screenshotsEnv, set to 1, makes TestBrowser save the README's screenshots
// in docs/.
const screenshotsEnv = "HERALD_SCREENSHOTS"

// longTopic is a topic name longer than a table's column should be.
const longTopic = "cache.invalidate.customer-profile-projection.eu-west-1.tenant-acme-international"

// layoutProblems lists what is wrong with the page's layout at the
// window's width: the page wider than the window, a badge on two lines, a
// topic, key or destination name broken over two lines (the text of the
// first two columns of a table whose first is a name). Lines are counted
// as the distinct bottoms of the boxes of a text's fragments.
const layoutProblems = `(function () {
	function lines(node) {
		var r = document.createRange();
		r.selectNodeContents(node);
		var bottoms = new Set();
		Array.from(r.getClientRects()).forEach(function (x) {
			if (x.width > 0 && x.height > 0) { bottoms.add(Math.round(x.bottom)); }
		});
		return bottoms.size;
	}
	var bad = [], page = document.documentElement;
	if (page.scrollWidth > page.clientWidth) {
		bad.push("the page is " + page.scrollWidth + "px wide in a " + page.clientWidth + "px window");
	}
	document.querySelectorAll(".badge").forEach(function (b) {
		if (b.getClientRects().length > 0 && lines(b) > 1) { bad.push("badge on " + lines(b) + " lines: " + b.textContent); }
	});
	document.querySelectorAll("td.topic, td.topic + td").forEach(function (td) {
		var w = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
		for (var n = w.nextNode(); n; n = w.nextNode()) {
			if (n.textContent.trim() !== "" && !n.parentElement.closest(".badge, form") && lines(n) > 1) {
				bad.push("name on " + lines(n) + " lines: " + n.textContent.trim());
			}
		}
	});
	return bad;
})()`

// headerColumn measures the event page's headers: the names' column as a
// percentage of the table's width, and its width beyond the widest name.
const headerColumn = `(function () {
	var box = document.getElementById("event-headers");
	var names = Array.from(box.querySelectorAll("th, dt")), widest = 0;
	names.forEach(function (n) {
		var r = document.createRange();
		r.selectNodeContents(n);
		widest = Math.max(widest, r.getBoundingClientRect().width);
	});
	var col = names[0].getBoundingClientRect().width;
	return {share: Math.round(100 * col / box.getBoundingClientRect().width), spare: Math.round(col - widest)};
})()`

// browserPath finds Chromium. Without it the test skips, except in CI.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Unavailable(t, "no chromium or chromium-browser on PATH: install it (Debian: apt-get install -y chromium) to run the browser test")
	return ""
}

// recorder is a publisher that confirms every event, except those of the
// topics it refuses, which fail permanently (and hold back the later events
// of their key in the batch, as the Publisher contract asks).
type recorder struct {
	mu        sync.Mutex
	refuse    map[string]bool
	refusal   map[string]error // a refused topic's error, if not the schema mismatch
	flaky     map[string]bool  // topics failing with an error worth a retry
	failed    []time.Time
	oldest    func() time.Duration // the oldest pending age now, for the last minute
	published map[string]time.Time
	order     []string
}

func newRecorder(refuse ...string) *recorder {
	r := &recorder{refuse: map[string]bool{}, refusal: map[string]error{}, flaky: map[string]bool{}, published: map[string]time.Time{}}
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
			if err := r.refusal[e.Topic]; err != nil {
				errs[i] = err
			}
			failedKeys[e.Topic+"\x00"+e.Key] = true
			r.failed = append(r.failed, time.Now())
		case r.flaky[e.Topic]:
			errs[i], failed = errors.New("POST https://hooks.example/in: 503 Service Unavailable"), true
			failedKeys[e.Topic+"\x00"+e.Key] = true
			r.failed = append(r.failed, time.Now())
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
	delete(r.flaky, topic)
}

func (r *recorder) flake(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flaky[topic] = true
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
func (r *recorder) rate() []heraldui.RatePoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().Truncate(time.Minute)
	points := make([]heraldui.RatePoint, 10)
	for i := range points {
		points[i].Minute = now.Add(time.Duration(i-9) * time.Minute)
	}
	for _, at := range r.published {
		if i := 9 - int(now.Sub(at.Truncate(time.Minute))/time.Minute); i >= 0 && i < 10 {
			points[i].Published++
		}
	}
	if r.oldest != nil {
		points[9].OldestPending = r.oldest()
	}
	for _, at := range r.failed {
		if i := 9 - int(now.Sub(at.Truncate(time.Minute))/time.Minute); i >= 0 && i < 10 {
			points[i].Failed++
		}
	}
	return points
}

// TestBrowser drives the page in headless Chromium, mounted under a prefix
// in a service's mux, against a running relay on the same SQLite outbox: a
// dead letter is found, inspected, requeued through its confirmation page,
// and really published.
func TestBrowser(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	chromium := browserPath(t)
	rec := newRecorder("orders", "invoices")
	// An invoice dies with the text a relay stored before it left the
	// batch index out of a refused row's error: the page leaves it out.
	rec.refusal["invoices"] = herald.Permanent(errors.New("invalid row: herald: message 15: topic: contains whitespace or a control character"))
	// The destinations: kafka takes every topic but hooks.*, which goes to
	// a webhook whose breaker the test opens, and cache.*, which goes to a
	// Redis whose last error, long ago, is long enough to squeeze the
	// table at 1,400 pixels.
	var webhookDown atomic.Bool
	var store *heraldsqlite.Driver
	b := setup(t, func(c *heraldui.Config) {
		c.Refresh = 300 * time.Millisecond
		c.Rate = rec.rate
		store = c.Admin.(*heraldsqlite.Driver)
		started := time.Now().Add(-3 * time.Hour)
		c.Admin = relaysStore{Driver: store, relays: []heraldadmin.RelayInfo{
			{Owner: "heraldui-browser-test", Version: "v1.4.0", StartedAt: started, HeartbeatAt: time.Now(), Leased: 0, Published: 20},
			{Owner: "worker-2/311", Version: "v1.4.0", StartedAt: started.Add(time.Hour), HeartbeatAt: time.Now(), Published: 1840},
		}}
		c.DestinationOf = func(topic string) string {
			switch {
			case strings.HasPrefix(topic, "hooks."):
				return "webhook"
			case strings.HasPrefix(topic, "cache."):
				return "sync.redis"
			}
			return "kafka"
		}
		c.DestinationStatus = func() []heraldui.Destination {
			hook := heraldui.Destination{Name: "webhook", Breaker: "closed"}
			if webhookDown.Load() {
				hook = heraldui.Destination{Name: "webhook", Breaker: "open", Failures: 5, LastError: "POST https://hooks.example/in: 503 Service Unavailable",
					LastErrorAt: time.Now()}
			}
			redis := heraldui.Destination{Name: "sync.redis", Breaker: "closed", LastErrorAt: time.Now().Add(-time.Hour),
				LastError: "XADD herald:cache.invalidate.customer-profile-projection: dial tcp 10.0.12.7:6379: connect: connection refused " +
					"(redis-sentinel master sync-redis-primary.cache.svc.cluster.local:26379 was failing over; READONLY You can't write against a read only replica)"}
			return []heraldui.Destination{{Name: "kafka", Breaker: "closed", InFlight: 1}, hook, redis}
		}
		c.Replay = func(ctx context.Context, req heraldui.ReplayRequest) (heraldui.ReplayResult, error) {
			return browserReplay(ctx, store, rec, req)
		}
	})
	rec.oldest = func() time.Duration {
		backlog, err := store.Backlog(context.Background())
		if err != nil {
			return 0
		}
		var oldest time.Duration
		for _, bl := range backlog {
			oldest = max(oldest, bl.OldestPending)
		}
		return oldest
	}

	relayLogs := &testenv.LogBuffer{}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: b.store, Publisher: rec, Owner: "heraldui-browser-test",
		Logger:       slog.New(slog.NewTextHandler(relayLogs, nil)),
		PollInterval: 5 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond,
		// A dead invoice does not park its key; a dead order does.
		SkipDeadTopics: []string{"invoices"},
		// A failed webhook waits an hour, until retried now.
		Retry: herald.RetryPolicy{Base: time.Hour, Cap: time.Hour},
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
		// Names longer than their values, as tracing headers have: the
		// names' column is no wider than they need.
		Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"x-datadog-sampling-priority": "1", "x-b3-sampled": "1", "ce-specversion": "1.0"},
	})[0]
	deadInvoice := b.write(t, herald.Message{Topic: "invoices", Key: "inv-7", Type: "invoice.issued", Payload: []byte{0x1f, 0x8b, 0x08, 0x00, 0xff},
		// A value longer than the page is wide wraps.
		Headers: map[string]string{"baggage": "tenant=acme-international,region=eu-west-1,plan=enterprise,origin=checkout-web," +
			"flags=new-pricing%2Cfast-checkout%2Cone-click%2Csplit-shipping%2Cgift-wrap,cohort=pricing-v7-b,source=ios-17.4.1-build-20261128-" +
			strings.Repeat("0123456789abcdef", 8)}})[0]
	require.Eventually(t, func() bool {
		return b.state(t, deadOrder) == heraldadmin.StateDead && b.state(t, deadInvoice) == heraldadmin.StateDead
	}, 10*time.Second, 10*time.Millisecond)
	waiting := b.write(t, herald.Message{Topic: "orders", Key: "order-42", Type: "order.paid"},
		herald.Message{Topic: "orders", Key: "order-42", Type: "order.shipped"})
	later := time.Now().Add(time.Hour)
	b.write(t, herald.Message{Topic: "payments", Key: "p-1", AvailableAt: later}, herald.Message{Topic: "payments", Key: "p-2", AvailableAt: later},
		herald.Message{Topic: longTopic, Key: "customer-7f3a9c2e-4b1d-4e8a-9f0c-2d7b6a1e5c33", AvailableAt: later})
	// The broker takes orders again; the dead one stays dead until requeued,
	// and its key stays parked.
	rec.accept("orders")

	browserLogs := &testenv.LogBuffer{}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium),
			chromedp.WindowSize(1400, 900),
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
	// text reads an element's text. The live refresh may replace the element
	// between finding it and reading it: read again until the deadline.
	text := func(sel string) string {
		t.Helper()
		var (
			s   string
			err error
		)
		require.Eventually(t, func() bool {
			sctx, c := context.WithTimeout(ctx, 5*time.Second)
			defer c()
			s, err = chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
			return err == nil
		}, 20*time.Second, 50*time.Millisecond, "%s: %v", sel, err)
		return s
	}
	// contains waits until sel's text holds want: a live refresh can
	// replace a row between finding its node and reading it (the text of
	// a detached node is empty).
	contains := func(sel, want string, msg ...any) {
		t.Helper()
		require.Eventually(t, func() bool {
			return strings.Contains(text(sel), want)
		}, 10*time.Second, 50*time.Millisecond, "%s does not contain %q %v", sel, want, msg)
	}
	// equals waits until sel's text is want, for the same reason: the
	// overview's figures are live texts too.
	equals := func(sel, want string, msg ...any) {
		t.Helper()
		var got string
		require.Eventually(t, func() bool {
			got = text(sel)
			return got == want
		}, 10*time.Second, 50*time.Millisecond, "%s is %q, want %q %v", sel, got, want, msg)
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
	// fits checks the page's layout (layoutProblems).
	fits := func(where string) {
		t.Helper()
		require.Empty(t, eval(layoutProblems), "the layout of the %s at 1400px", where)
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
		dir := filepath.Join("..", "..", "docs")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}

	// Log in, land on the overview.
	do(chromedp.Navigate(b.url+"/"), page("overview"))
	require.Equal(t, "Log in to act", text("#login-link"))
	do(chromedp.Click(chromedp.ID("login-link")), page("login"),
		chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("login-submit")), page("overview"))
	equals("#total-dead", "2")
	equals("#total-parked", "1")
	equals("#total-ready", "5", "two orders behind the parked key, two payments and a cache event for later")
	equals("#rate-total", "20")
	fits("overview")
	require.Equal(t, longTopic, eval(`document.querySelector('#backlog tr[data-key="`+longTopic+`"] .name').title`),
		"a long topic is cut, whole in its title")
	// Where retrying and waiting for a down destination are counted, the
	// page says how they differ.
	contains("#states-help", "each waits out its own backoff, and every attempt counts")
	contains("#states-help", "the relay stops sending to it and waits, spending no attempts")
	screenshot("admin-overview.png")

	// The script's row rendering, on rows of its own: kept keys keep
	// their row (updated), gone ones go, new ones come, in the JSON's order.
	// A key is any text a topic may be, "constructor" among them.
	require.Equal(t, `{"keys":["c","constructor","a"],"texts":["30","4","10"],"keptA":true,"keptC":true,"children":4}`, eval(`(function () {
		var box = document.createElement("tbody");
		box.innerHTML = '<template><tr data-key="" data-key-f="id"><td data-f="n"></td></tr></template>';
		renderRows(box, [{id: "a", n: 1}, {id: "b", n: 2}, {id: "c", n: 3}]);
		var a = box.querySelector('tr[data-key="a"]'), c = box.querySelector('tr[data-key="c"]');
		renderRows(box, [{id: "c", n: 30}, {id: "constructor", n: 4}, {id: "a", n: 10}]);
		var rows = Array.from(box.children).filter(function (r) { return r.tagName === "TR"; });
		return JSON.stringify({keys: rows.map(function (r) { return r.dataset.key; }),
			texts: rows.map(function (r) { return r.textContent; }), keptA: rows[2] === a, keptC: rows[0] === c,
			children: box.children.length});
	})()`))

	// The dead letters: both there; the script's select-all box works.
	do(chromedp.Click(chromedp.CSS(`a[href="`+prefix+`/dead"]`)), page("dead"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+deadOrder+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+deadInvoice+`"]`)))
	do(chromedp.Click(chromedp.ID("select-all")))
	require.EqualValues(t, 2, eval(`document.querySelectorAll("input.pick:checked").length`))
	do(chromedp.Click(chromedp.ID("select-all")))
	require.EqualValues(t, 0, eval(`document.querySelectorAll("input.pick:checked").length`))
	fits("dead letters")
	// The invoice's error is shown without the batch index older relays
	// stored; the stored text is its title.
	invoiceError := `tr[data-id="` + deadInvoice + `"] td.err`
	require.Equal(t, "permanent: invalid row: topic: contains whitespace or a control character", text(invoiceError))
	require.Equal(t, "permanent: invalid row: herald: message 15: topic: contains whitespace or a control character",
		eval(`document.querySelector('`+invoiceError+`').title`))
	screenshot("admin-dead-list.png")

	// The invoice's page: the error without the index, the stored text
	// below it; a header value wider than the page wraps.
	do(chromedp.Navigate(b.url+"/events/"+deadInvoice), page("event"))
	require.Equal(t, "permanent: invalid row: topic: contains whitespace or a control character", text("#event-error"))
	require.Contains(t, text("#event-error-stored"), "herald: message 15: topic:")
	fits("invoice's page")
	require.Equal(t, true, eval(`document.querySelector("#event-headers dd, #event-headers td").getClientRects()[0].height > 40`),
		"the long value wraps")
	do(chromedp.Navigate(b.url+"/dead"), page("dead"), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+deadOrder+`"]`)))

	// The order's page: its payload is shown as text, never run.
	do(chromedp.Click(chromedp.CSS(`a[href="`+prefix+`/events/`+deadOrder+`"]`)), page("event"))
	require.Equal(t, "dead", text("#event-state"))
	require.Contains(t, text("#event-parked"), "order-42")
	require.Contains(t, text("#payload"), `<img src=x onerror=`)
	require.EqualValues(t, 0, eval(`document.querySelectorAll("#payload *").length`), "the payload made no element")
	require.NotEqual(t, "pwned", eval(`document.title`))
	require.Contains(t, text("#event-error"), "<b>schema mismatch</b>", "shown as text")
	require.NotContains(t, text("#event-error"), "tok-9f8e7d", "scrubbed")
	fits("event's page")
	// The header names take the width they need, not most of the table.
	cols, _ := eval(headerColumn).(map[string]any)
	require.LessOrEqual(t, cols["share"], 30.0, "%v", cols)
	require.LessOrEqual(t, cols["spare"], 24.0, "the names' column is as wide as the widest name and its padding: %v", cols)
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
	do(chromedp.Navigate(b.url+"/"), page("overview"))
	equals("#total-dead", "1")
	equals("#total-parked", "0")
	equals("#rate-total", "23", "the requeued event and the two behind it were published")
	do(chromedp.Navigate(b.url+"/events/"+deadOrder), page("event"))
	require.Equal(t, "published", text("#event-state"))

	// Pause a topic from the overview: the relay leaves its new events
	// alone, the page counts them, and Resume lets them go, in order.
	do(chromedp.Navigate(b.url+"/"), page("overview"), chromedp.WaitVisible(chromedp.ID("paused-empty")))
	do(chromedp.SetValue(chromedp.ID("pause-kind"), "topic"),
		chromedp.SendKeys(chromedp.ID("pause-name"), "orders.shipped"),
		chromedp.SendKeys(chromedp.ID("pause-reason"), "consumer <b>migration</b>"),
		chromedp.Click(chromedp.ID("pause-submit")), page("overview"),
		chromedp.WaitVisible(chromedp.CSS(`#paused tr[data-name="orders.shipped"]`)))
	require.Contains(t, text(`#paused tr[data-name="orders.shipped"]`), "consumer <b>migration</b>", "the reason, as text")
	require.Eventually(t, func() bool { return slices.Contains(relay.Paused(), "orders.shipped") }, 10*time.Second, 10*time.Millisecond,
		"the relay reads the pause within a second")
	held := b.write(t, herald.Message{Topic: "orders.shipped", Key: "order-7", Type: "a"},
		herald.Message{Topic: "orders.shipped", Key: "order-7", Type: "b"}, herald.Message{Topic: "orders.shipped", Key: "order-7", Type: "c"})
	do(chromedp.Navigate(b.url+"/"), page("overview"))
	equals(`#paused tr[data-name="orders.shipped"] td.waiting`, "3")
	contains("#backlog", "paused")
	// The destination the topic goes to says one of its topics is paused.
	contains(`#destinations tr[data-key="kafka"]`, "1 topic paused")
	require.Equal(t, "paused: orders.shipped", eval(`document.querySelector('#destinations tr[data-key="kafka"] .badge.paused').title`))
	require.NotContains(t, text(`#destinations tr[data-key="webhook"]`), "paused")
	fits("overview with a pause")
	require.False(t, rec.has(held[0]), "nothing of a paused topic is published")
	for _, id := range held {
		require.Equal(t, heraldadmin.StateReady, b.state(t, id))
	}
	screenshot("admin-paused.png")
	do(chromedp.Click(chromedp.CSS(`#paused tr[data-name="orders.shipped"] button.resume`)), page("overview"),
		chromedp.WaitVisible(chromedp.ID("paused-empty")))
	require.Eventually(t, func() bool { return rec.has(held...) }, 10*time.Second, 10*time.Millisecond)
	order = rec.publishedOrder()
	require.Equal(t, held, order[len(order)-3:], "resumed in the key's order")

	lines := b.auditLines(t)
	require.Len(t, lines, 4)
	require.Equal(t, "login", lines[0]["action"])
	require.Equal(t, "requeue", lines[1]["action"])
	require.Equal(t, []any{deadOrder}, lines[1]["ids"])
	require.InDelta(t, 1, lines[1]["changed"], 0)
	require.Equal(t, "pause", lines[2]["action"])
	require.Equal(t, "orders.shipped", lines[2]["name"])
	require.Equal(t, "consumer <b>migration</b>", lines[2]["reason"])
	require.Equal(t, "resume", lines[3]["action"])
	require.Equal(t, "done", lines[3]["outcome"])

	// The webhook fails: its events wait for a retry, its breaker opens,
	// and the overview says so beside the backlog.
	rec.flake("hooks.orders")
	hooks := b.write(t, herald.Message{Topic: "hooks.orders", Key: "h-1", Type: "order.placed"},
		herald.Message{Topic: "hooks.orders", Key: "h-2", Type: "order.placed"})
	require.Eventually(t, func() bool {
		rows, err := store.ListRetrying(t.Context(), heraldadmin.RetryFilter{Topic: "hooks.orders"})
		return err == nil && len(rows) == 2
	}, 10*time.Second, 10*time.Millisecond)
	webhookDown.Store(true)
	do(chromedp.Navigate(b.url+"/"), page("overview"), chromedp.WaitVisible(chromedp.CSS(`#outages .outage`)))
	// The outage's line may be visible before its text is written:
	// read it until it says so.
	contains(`#outages .outage`, "webhook is down (circuit open): 2 ready events wait for it")
	contains("#stuck", "2 wait for a down destination")
	contains(`#destinations tr[data-key="webhook"]`, "503 Service Unavailable")
	contains(`#retry-groups`, "503 Service Unavailable")
	contains(`#relays`, "worker-2/311")
	equals("#total-retrying", "2")

	// Live: a figure changes without a reload, and a row whose key stays
	// is the same row after the refresh, updated in place, so that nothing
	// that did not change moves under the operator's pointer.
	eval(`window.heraldMarker = 42`)
	eval(`document.querySelector('#destinations tr[data-key="webhook"]').heraldKept = true`)
	ready := text("#total-ready")
	later2 := time.Now().Add(time.Hour)
	b.write(t, herald.Message{Topic: "payments", Key: "p-3", AvailableAt: later2})
	require.Eventually(t, func() bool { return text("#total-ready") != ready }, 10*time.Second, 20*time.Millisecond,
		"the ready count is refreshed in place")
	require.EqualValues(t, 42, eval(`window.heraldMarker`), "the page was not reloaded")
	contains(`#destinations tr[data-key="webhook"]`, "503 Service Unavailable",
		"rows refreshed in place keep their keys")
	require.Equal(t, true, eval(`document.querySelector('#destinations tr[data-key="webhook"]').heraldKept === true`),
		"the row was updated in place, not made again")
	require.EqualValues(t, 1, eval(`document.querySelectorAll('#destinations tr[data-key="webhook"]').length`))
	require.NotContains(t, text("#destinations"), "undefined", "a field the JSON leaves out is shown empty")
	require.EqualValues(t, 3*len(rec.rate()), eval(`document.querySelectorAll("svg.chart rect").length`),
		"the charts are redrawn from the JSON, one bar a minute each")
	fits("overview with an outage")
	screenshot("admin-overview.png")

	// While a confirmation is open the page holds still. The confirmation
	// is opened as the summary's click opens it, by its open attribute: a
	// mouse click goes to where the row was when it was found, and a
	// refresh can move the rows in between, so that the click lands on
	// another control of the live page (one CI run found the page
	// refreshing again after such a click).
	eval(`document.querySelector("#retry-groups tr details.confirm").open = true`)
	do(chromedp.WaitVisible(chromedp.CSS(`#retry-groups button.retry-now`)))
	ready = text("#total-ready")
	b.write(t, herald.Message{Topic: "payments", Key: "p-4", AvailableAt: later2})
	eval(`document.getElementById("live").dataset.state = ""`)
	// Each poll reads the page's state whole, for the failure message.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		state, _ := eval(`JSON.stringify({page: location.href, open: !!document.querySelector("details.confirm[open]"),
			state: document.getElementById("live").dataset.state, refreshes: document.getElementById("live").dataset.refreshes})`).(string)
		if strings.Contains(state, `"state":"paused"`) {
			break
		}
		require.Contains(t, state, `"open":true`, "the confirmation stays open under the live page")
		require.True(t, time.Now().Before(deadline), "a refresh came and held back: %s", state)
	}
	require.Equal(t, ready, text("#total-ready"), "nothing moved under the open confirmation")
	screenshot("admin-retrying.png")

	// Retry the group now: the webhook is back, and its events go at once,
	// not in an hour.
	rec.accept("hooks.orders")
	webhookDown.Store(false)
	do(chromedp.Click(chromedp.CSS(`button.retry-now`)), page("overview"), chromedp.WaitVisible(chromedp.ID("retried")))
	require.Contains(t, text("#retried"), "2 events were made available now")
	require.Eventually(t, func() bool { return rec.has(hooks...) }, 10*time.Second, 10*time.Millisecond)

	// Replay from the page: a count first, then the confirmed replay.
	before := len(rec.publishedOrder())
	do(chromedp.Navigate(b.url+"/replay"), page("replay"),
		chromedp.SendKeys(chromedp.ID("replay-topic"), "orders.shipped"),
		chromedp.Click(chromedp.ID("replay-count-button")), page("replay"), chromedp.WaitVisible(chromedp.ID("replay-confirm")))
	require.Contains(t, text("#replay-count"), "23 events match · kafka: 23")
	require.Equal(t, before, len(rec.publishedOrder()), "counting published nothing")
	screenshot("admin-replay.png")
	do(chromedp.Click(chromedp.ID("replay-confirm-button")), page("replay"), chromedp.WaitVisible(chromedp.ID("replay-done")))
	require.Contains(t, text("#replay-done"), "Replayed 23 events · kafka: 23")
	require.Len(t, rec.publishedOrder(), before+23)

	lines = b.auditLines(t)
	require.Len(t, lines, 7)
	require.Equal(t, "retry_now", lines[4]["action"])
	require.InDelta(t, 2, lines[4]["changed"], 0)
	require.Equal(t, "replay_count", lines[5]["action"])
	require.Equal(t, "replay", lines[6]["action"])
	require.InDelta(t, 23, lines[6]["events"], 0)
}

// browserReplay is the browser test's Config.Replay: the published events
// the store lists, counted or sent again to the recorder under new ids.
func browserReplay(ctx context.Context, store *heraldsqlite.Driver, rec *recorder, req heraldui.ReplayRequest) (heraldui.ReplayResult, error) {
	f := req.Filter
	f.Limit = heraldadmin.MaxListLimit
	rows, err := store.ListPublished(ctx, f)
	if err != nil {
		return heraldui.ReplayResult{}, err
	}
	res := heraldui.ReplayResult{Events: len(rows), ByDestination: map[string]int{"kafka": len(rows)}}
	if req.DryRun || len(rows) == 0 {
		return res, nil
	}
	batch := make([]herald.Envelope, len(rows))
	for i, r := range rows {
		batch[i] = r.Envelope
		batch[i].ID = herald.NewID()
	}
	return res, rec.Publish(ctx, batch)
}
