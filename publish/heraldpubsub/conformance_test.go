package heraldpubsub_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// The shared publisher suite against pstest, the client library's
// in-process Pub/Sub server. Each topic has a subscription with message
// ordering enabled, which Read drains. A second server refuses every third
// publish request with ResourceExhausted, as the service does over quota.
//
// PermanentTooLarge: the publisher checks Config.MaxMessageBytes before
// sending; pstest itself enforces no size limit. No Dedup: Pub/Sub has
// none on publish.
func TestConformance(t *testing.T) { conformance(t, nil) }

// The same with CloudEvents on, in each mode: Parse gives back what the
// suite sent.
func TestConformanceCloudEvents(t *testing.T) {
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode), func(t *testing.T) {
			conformance(t, &heraldce.Config{Source: "/conformance", Mode: mode})
		})
	}
}

func conformance(t *testing.T, ce *heraldce.Config) {
	const tooLarge = 128 << 10
	f := newFake(t, nil)
	var requests atomic.Int64
	busy := newFake(t, func(*pb.PublishRequest) error {
		if requests.Add(1)%3 == 0 {
			return status.Error(codes.ResourceExhausted, "quota exceeded")
		}
		return nil
	})
	var topics atomic.Int64
	cfg := &heraldpubsub.Config{MaxMessageBytes: tooLarge / 2, CloudEvents: ce}

	publishertest.Run(t, publishertest.Harness{
		Features: publishertest.Features{KeyOrder: true, Headers: true, PermanentTooLarge: true},
		New:      func(t *testing.T) herald.Publisher { return f.publisher(t, cfg) },
		Topic: func(t *testing.T) string {
			id := fmt.Sprintf("conformance-%d", topics.Add(1))
			f.topic(t, id)
			busy.topic(t, id)
			return id
		},
		Read: f.read,
		Unreachable: func(t *testing.T) herald.Publisher {
			client, err := heraldpubsub.NewClient(context.Background(), project, heraldpubsub.EmulatorOptions("127.0.0.1:1")...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = client.Close() })
			p, err := heraldpubsub.New(client, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			return p
		},
		TooLarge: tooLarge,
		Busy: &publishertest.Busy{
			New:  func(t *testing.T) herald.Publisher { return busy.publisher(t, &heraldpubsub.Config{CloudEvents: ce}) },
			Read: busy.read,
		},
	})
}
