package heraldroute_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldroute"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// maxBody is the receivers' body limit: a larger payload gets 413, the
// permanent failure the suite's too-large case needs.
const maxBody = 64 << 10

// The shared publisher suite through a Router with two real destinations:
// two webhook endpoints, each an HTTP server of its own with its own
// signing secret. Topics alternate between the two routes, so the cases run
// through both, and what a destination reports (per-event results, a
// permanent failure, held-back events, an outage) has to come through the
// router unchanged.
func TestConformance(t *testing.T) {
	t.Parallel()
	h := &routeHarness{receivers: map[string]*receiver{
		"east": newReceiver(t, "a key only the east endpoint knows"),
		"west": newReceiver(t, "a key only the west endpoint knows"),
	}}
	publishertest.Run(t, publishertest.Harness{
		// KeyOrder, Headers and PermanentTooLarge are the webhook
		// publisher's, which the router must keep. No Dedup: receivers
		// drop duplicates by webhook-id themselves.
		Features: publishertest.Features{KeyOrder: true, Headers: true, PermanentTooLarge: true},
		New:      h.new,
		Topic:    h.topic,
		Read:     h.read,
		Unreachable: func(t *testing.T) herald.Publisher {
			return h.router(t, "http://127.0.0.1:1", "http://127.0.0.1:1")
		},
		TooLarge: maxBody + 1,
	})
}

type routeHarness struct {
	receivers map[string]*receiver // destination name -> its endpoint
	seq       atomic.Int64
	sent      sync.Map // event id -> producer headers as sent
}

// topic alternates between conformance.east.N and conformance.west.N.
func (h *routeHarness) topic(*testing.T) string {
	n := h.seq.Add(1)
	return fmt.Sprintf("conformance.%s.%d", [...]string{"east", "west"}[n%2], n)
}

func (h *routeHarness) new(t *testing.T) herald.Publisher {
	r := h.router(t, h.receivers["east"].srv.URL, h.receivers["west"].srv.URL)
	// Remember each event's headers, for read to restore their names'
	// spelling (see producerHeaders). It only records: Publish is the
	// router's.
	return herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
		for _, e := range batch {
			h.sent.Store(e.ID, e.Headers)
		}
		return r.Publish(ctx, batch)
	})
}

// router routes conformance.east.* and conformance.west.* to a webhook
// publisher each, at eastURL and westURL; other topics go to east.
func (h *routeHarness) router(t *testing.T, eastURL, westURL string) *heraldroute.Router {
	t.Helper()
	webhook := func(url, secret string) herald.Publisher {
		p, err := heraldwebhook.New(&heraldwebhook.Config{
			Default:         heraldwebhook.Endpoint{URL: url + "/hooks"},
			Secret:          secret,
			AllowedNetworks: []string{"127.0.0.0/8"},
			Logger:          slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	r, err := heraldroute.New(&heraldroute.Config{
		Destinations: []heraldroute.Destination{
			{Name: "east", Publisher: webhook(eastURL, h.receivers["east"].secret)},
			{Name: "west", Publisher: webhook(westURL, h.receivers["west"].secret)},
		},
		Routes: []heraldroute.Route{
			{Topic: "conformance.east.*", Destination: "east"},
			{Topic: "conformance.west.*", Destination: "west"},
		},
		Default: "east",
		Logger:  slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return r
}

// read returns the events the topic's destination accepted, in arrival
// order, after checking that none reached the other one.
func (h *routeHarness) read(t *testing.T, topic string, n int) []publishertest.Received {
	dest := strings.Split(topic, ".")[1]
	reqs := h.receivers[dest].wait(t, topic, n)
	for name, rc := range h.receivers {
		if name != dest {
			require.Empty(t, rc.accepted(t, topic), "destination %s got events of topic %s", name, topic)
		}
	}
	out := make([]publishertest.Received, len(reqs))
	for i, r := range reqs {
		id := r.header.Get("webhook-id")
		require.Equal(t, id, r.header.Get(herald.HeaderID))
		ev, av, err := herald.ParseVersions(r.header.Get(herald.HeaderEventVersion), r.header.Get(herald.HeaderAggregateVersion))
		require.NoError(t, err)
		out[i] = publishertest.Received{
			ID: id, Topic: topic, Key: r.header.Get(herald.HeaderKey), Type: r.header.Get(herald.HeaderType),
			EventVersion: ev, AggregateVersion: av, Payload: r.body, Headers: h.producerHeaders(id, r.header),
		}
	}
	return out
}

// producerHeaders returns the headers of a request that the publisher did
// not set itself. HTTP header names are case-insensitive and Go's server
// canonicalizes them ("traceparent" arrives as "Traceparent"), so a name
// that matches a sent one regardless of case takes the sent spelling; the
// suite's exact comparison then checks the values and the set of names.
func (h *routeHarness) producerHeaders(id string, header http.Header) map[string]string {
	var sent map[string]string
	if v, ok := h.sent.Load(id); ok {
		sent, _ = v.(map[string]string)
	}
	out := map[string]string{}
	for name, values := range header {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "webhook-") || strings.HasPrefix(lower, "herald-") ||
			lower == "user-agent" || lower == "content-length" ||
			lower == "content-type" && len(values) == 1 && values[0] == "application/json" {
			continue
		}
		for s := range sent {
			if strings.EqualFold(s, name) {
				name = s
			}
		}
		out[name] = strings.Join(values, ", ")
	}
	return out
}

// receiver is a webhook endpoint that verifies every request's signature
// with its own secret and records the requests it accepted.
type receiver struct {
	secret string
	srv    *httptest.Server

	mu      sync.Mutex
	got     []*request
	badSigs []string
	changed chan struct{} // closed and replaced on every request
}

type request struct {
	header http.Header
	body   []byte
}

// newReceiver starts a receiver whose secret signs with key (24 to 64
// bytes), closed when the test ends.
func newReceiver(t *testing.T, key string) *receiver {
	t.Helper()
	rc := &receiver{
		secret:  heraldwebhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte(key)),
		changed: make(chan struct{}),
	}
	rc.srv = httptest.NewServer(rc)
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err := heraldwebhook.Verify(rc.secret, r.Header, body, time.Minute); err != nil {
		rc.badSigs = append(rc.badSigs, fmt.Sprintf("%s: %v", r.Header.Get("webhook-id"), err))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	rc.got = append(rc.got, &request{header: r.Header.Clone(), body: body})
	close(rc.changed)
	rc.changed = make(chan struct{})
	w.WriteHeader(http.StatusNoContent)
}

// accepted returns the requests of topic accepted so far, in arrival
// order, after checking that every signature verified.
func (rc *receiver) accepted(t *testing.T, topic string) []*request {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Empty(t, rc.badSigs, "every request carries a valid signature")
	var out []*request
	for _, r := range rc.got {
		if r.header.Get(herald.HeaderTopic) == topic {
			out = append(out, r)
		}
	}
	return out
}

// wait waits, at most 10s, until n requests of topic were accepted, and
// returns every one.
func (rc *receiver) wait(t *testing.T, topic string, n int) []*request {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		rc.mu.Lock()
		changed := rc.changed
		rc.mu.Unlock()
		got := rc.accepted(t, topic)
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			require.FailNowf(t, "requests missing", "only %d of %d requests of %s arrived", len(got), n, topic)
		}
	}
}
