package heraldwebhook_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	for _, mode := range []heraldce.Mode{"", heraldce.Binary, heraldce.Structured} {
		t.Run("ModeIs"+string(mode)+"SignedAndReadByTheSDK", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := b.publisher(t, &heraldwebhook.Config{
				Default: heraldwebhook.Endpoint{URL: b.url("/hooks")}, Secret: testSecret, AllowedNetworks: loopback,
				CloudEvents: &heraldce.Config{Source: "/shop/orders", Mode: mode},
			})
			env := envelope("orders", "order-42", `{"order":42}`)
			env.Type, env.AggregateType, env.AggregateID = "order.placed", "order", "42"
			env.EventVersion, env.AggregateVersion = 2, 7
			env.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
			env.Headers = map[string]string{"Content-Type": "application/json", "traceparent": traceparent, "X-Tenant": "acme"}
			require.NoError(t, publish(t, p, env))

			// The receiver verified the signature over the body it got.
			req := b.rcv.wait(t, 1, nil)[0]
			require.Equal(t, env.ID, req.id())
			require.Empty(t, req.header.Get(herald.HeaderID), "Herald-* headers give way to the extensions")
			require.Equal(t, "acme", req.header.Get("X-Tenant"))
			if mode == heraldce.Structured {
				require.Equal(t, heraldce.StructuredContentType, req.header.Get("Content-Type"))
			} else {
				require.Equal(t, env.Payload, req.body)
				require.Equal(t, env.ID, req.header.Get("ce-id"))
			}

			e, err := binding.ToEvent(context.Background(), cehttp.NewMessage(req.header, io.NopCloser(bytes.NewReader(req.body))))
			require.NoError(t, err)
			require.NoError(t, e.Validate())
			require.Equal(t, env.ID, e.ID())
			require.Equal(t, "order.placed", e.Type())
			require.Equal(t, "/shop/orders", e.Source())
			require.Equal(t, "42", e.Subject())
			require.True(t, env.CreatedAt.Equal(e.Time()))
			require.Equal(t, "application/json", e.DataContentType())
			require.JSONEq(t, `{"order":42}`, string(e.Data()))
			require.Equal(t, map[string]any{
				"traceparent": traceparent, "heraldtopic": "orders", "heraldkey": "order-42", "heraldaggregatetype": "order",
				"heraldeventversion": "2", "heraldaggversion": "7",
			}, e.Extensions())

			back, err := heraldce.ParseHTTP(req.header, req.body)
			require.NoError(t, err)
			require.Equal(t, env.ID, back.ID)
			require.Equal(t, env.Topic, back.Topic)
			require.Equal(t, env.Key, back.Key)
			require.Equal(t, env.Type, back.Type)
			require.Equal(t, env.AggregateType, back.AggregateType)
			require.Equal(t, env.AggregateID, back.AggregateID)
			require.Equal(t, 2, back.EventVersion)
			require.Equal(t, int64(7), back.AggregateVersion)
			require.Equal(t, env.Payload, back.Payload)
			require.Equal(t, "acme", back.Headers["X-Tenant"])
			require.Equal(t, "application/json", back.Headers["Content-Type"])
		})
	}

	t.Run("OffKeepsTheHeraldFormat", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		env := envelope("orders", "order-42", `{"order":42}`)
		require.NoError(t, publish(t, p, env))
		req := b.rcv.wait(t, 1, nil)[0]
		require.Equal(t, env.ID, req.header.Get(herald.HeaderID))
		require.Empty(t, req.header.Get("ce-id"))
		require.Equal(t, "application/json", req.header.Get("Content-Type"))
	})

	t.Run("NewRefusesAConfigWithoutSource", func(t *testing.T) {
		t.Parallel()
		_, err := heraldwebhook.New(&heraldwebhook.Config{
			Default: heraldwebhook.Endpoint{URL: "https://hooks.example/x"}, Secret: testSecret,
			CloudEvents: &heraldce.Config{},
		})
		require.ErrorContains(t, err, "heraldwebhook: Config.CloudEvents.Source is required")
		_, err = heraldwebhook.New(&heraldwebhook.Config{
			Default: heraldwebhook.Endpoint{URL: "https://hooks.example/x"}, Secret: testSecret,
			CloudEvents: &heraldce.Config{Source: "not a uri"},
		})
		require.ErrorContains(t, err, "not a URI-reference")
	})

	t.Run("ConfigStringShowsIt", func(t *testing.T) {
		t.Parallel()
		c := heraldwebhook.Config{CloudEvents: &heraldce.Config{Source: "/s", Mode: heraldce.Structured}}
		require.Contains(t, c.String(), "CloudEvents:{Source:/s Mode:structured}")
	})
}
