package heraldwebhook_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// conformanceMaxBody is the receiver's body limit in the suite: larger
// payloads get 413, the permanent failure the suite's too-large case needs.
const conformanceMaxBody = 64 << 10

func TestConformance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.rcv.maxBody = conformanceMaxBody
	h := &harness{b: b, topics: map[string]string{}}

	publishertest.Run(t, publishertest.Harness{
		// A receiver drops duplicates by webhook-id itself; nothing between
		// the publisher and it does.
		Features: publishertest.Features{KeyOrder: true, Headers: true, PermanentTooLarge: true},
		New:      h.new,
		Topic:    h.topic,
		Read:     h.read,
		Unreachable: func(t *testing.T) herald.Publisher {
			return newPublisher(t, &heraldwebhook.Config{
				Default: heraldwebhook.Endpoint{URL: "http://127.0.0.1:1/hooks"}, Secret: testSecret, AllowedNetworks: loopback,
			})
		},
		TooLarge: conformanceMaxBody + 1,
	})
}

// harness gives each topic a URL of its own and builds each publisher with
// the topics handed out so far: the suite asks for its topic before its
// publisher, so routing by exact topic name is exercised on every case.
type harness struct {
	b      *bundle
	seq    atomic.Int64
	mu     sync.Mutex
	topics map[string]string // topic -> path
	sent   sync.Map          // event id -> producer headers as sent
}

func (h *harness) topic(t *testing.T) string {
	topic := fmt.Sprintf("conformance.t%d", h.seq.Add(1))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.topics[topic] = "/topics/" + topic
	return topic
}

func (h *harness) new(t *testing.T) herald.Publisher {
	h.mu.Lock()
	endpoints := make(map[string]heraldwebhook.Endpoint, len(h.topics))
	for topic, path := range h.topics {
		endpoints[topic] = heraldwebhook.Endpoint{URL: h.b.url(path)}
	}
	h.mu.Unlock()
	p := newPublisher(t, &heraldwebhook.Config{Endpoints: endpoints, Secret: testSecret, AllowedNetworks: loopback})
	// Remember the headers of each event, for read to restore their names'
	// spelling (see read). It only records: Publish is the publisher's.
	return herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
		for _, e := range batch {
			h.sent.Store(e.ID, e.Headers)
		}
		return p.Publish(ctx, batch)
	})
}

// read returns the events the receiver accepted (2xx) on topic's URL, all
// signatures verified.
func (h *harness) read(t *testing.T, topic string, n int) []publishertest.Received {
	h.mu.Lock()
	path := h.topics[topic]
	h.mu.Unlock()
	accepted := func(r *request) bool { return r.path == path && r.status/100 == 2 }
	reqs := h.b.rcv.wait(t, n, accepted)
	out := make([]publishertest.Received, len(reqs))
	for i, r := range reqs {
		require.Equal(t, topic, r.header.Get(herald.HeaderTopic), "the topic's URL receives only its events")
		require.Equal(t, r.id(), r.header.Get(herald.HeaderID))
		// A webhook receiver has no Parse: it reads the versions as any
		// consumer of the headers does.
		ev, av, err := herald.ParseVersions(r.header.Get(herald.HeaderEventVersion), r.header.Get(herald.HeaderAggregateVersion))
		require.NoError(t, err)
		out[i] = publishertest.Received{
			ID: r.id(), Topic: r.header.Get(herald.HeaderTopic), Key: r.key(), Type: r.header.Get(herald.HeaderType),
			EventVersion: ev, AggregateVersion: av, Payload: r.body, Headers: h.producerHeaders(r),
		}
	}
	return out
}

// producerHeaders returns the headers of r that the publisher did not set
// itself. HTTP header names are case-insensitive and Go's server
// canonicalizes them ("traceparent" arrives as "Traceparent"), so a name
// that matches a sent one regardless of case takes the sent spelling; the
// suite's exact comparison then checks the values and the set of names.
func (h *harness) producerHeaders(r *request) map[string]string {
	var sent map[string]string
	if v, ok := h.sent.Load(r.id()); ok {
		sent, _ = v.(map[string]string)
	}
	out := map[string]string{}
	for name, values := range r.header {
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

var _ http.Handler = (*receiver)(nil)
