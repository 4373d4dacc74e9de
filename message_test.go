package herald_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

func TestPrepare(t *testing.T) {
	t.Parallel()

	t.Run("GeneratesUUIDv7AndDefaultsKeyToAggregateID", func(t *testing.T) {
		t.Parallel()
		out, err := herald.Prepare([]herald.Message{{Topic: "orders", AggregateID: "42"}}, 0)
		require.NoError(t, err)
		id, err := uuid.Parse(out[0].ID)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), id.Version())
		require.Equal(t, "42", out[0].Key)
		require.Equal(t, 1, out[0].EventVersion, "an event without a version is version 1")
		require.Zero(t, out[0].AggregateVersion, "no aggregate version unless given")
	})

	t.Run("KeepsVersions", func(t *testing.T) {
		t.Parallel()
		out, err := herald.Prepare([]herald.Message{{Topic: "t", EventVersion: herald.MaxEventVersion, AggregateVersion: 1 << 62}}, 0)
		require.NoError(t, err)
		require.Equal(t, herald.MaxEventVersion, out[0].EventVersion)
		require.Equal(t, int64(1<<62), out[0].AggregateVersion)
	})

	t.Run("KeepsAnExplicitKeyAndNormalisesTheID", func(t *testing.T) {
		t.Parallel()
		out, err := herald.Prepare([]herald.Message{{ID: "0190F1A2-0000-7000-8000-000000000001", Topic: "t", Key: "k", AggregateID: "a"}}, 0)
		require.NoError(t, err)
		require.Equal(t, "0190f1a2-0000-7000-8000-000000000001", out[0].ID)
		require.Equal(t, "k", out[0].Key)
	})

	bad := []struct {
		name  string
		msg   herald.Message
		field string
	}{
		{"EmptyTopic", herald.Message{}, "topic"},
		{"TopicWithSpace", herald.Message{Topic: "a b"}, "topic"},
		{"TopicTooLong", herald.Message{Topic: strings.Repeat("t", herald.MaxTopicLen+1)}, "topic"},
		{"IDNotUUID", herald.Message{ID: "nope", Topic: "t"}, "id"},
		{"KeyBadUTF8", herald.Message{Topic: "t", Key: "\xff"}, "key"},
		{"TypeWithNUL", herald.Message{Topic: "t", Type: "a\x00b"}, "type"},
		{"AggregateIDBadUTF8", herald.Message{Topic: "t", Key: "k", AggregateID: "\xc3\x28"}, "aggregate_id"},
		{"NegativeEventVersion", herald.Message{Topic: "t", EventVersion: -1}, "event_version"},
		{"EventVersionOverInt32", herald.Message{Topic: "t", EventVersion: herald.MaxEventVersion + 1}, "event_version"},
		{"NegativeAggregateVersion", herald.Message{Topic: "t", AggregateVersion: -3}, "aggregate_version"},
		{"PayloadOverCap", herald.Message{Topic: "t", Payload: make([]byte, 11)}, "payload"},
		{"HeaderNameWithSpace", herald.Message{Topic: "t", Headers: map[string]string{"a b": "v"}}, "headers"},
		{"HeaderNameWithCRLF", herald.Message{Topic: "t", Headers: map[string]string{"a\r\nb": "v"}}, "headers"},
		{"HeaderValueWithLF", herald.Message{Topic: "t", Headers: map[string]string{"X-A": "v\nInjected: 1"}}, "headers[X-A]"},
		{"HeaderValueBadUTF8", herald.Message{Topic: "t", Headers: map[string]string{"X-A": "\xff"}}, "headers[X-A]"},
		{"ReservedNatsHeader", herald.Message{Topic: "t", Headers: map[string]string{"Nats-Msg-Id": "x"}}, "headers"},
		{"ReservedHeraldHeader", herald.Message{Topic: "t", Headers: map[string]string{"herald-id": "x"}}, "headers"},
		{"ReservedRabbitCC", herald.Message{Topic: "t", Headers: map[string]string{"CC": "x"}}, "headers"},
		{"ReservedHopByHop", herald.Message{Topic: "t", Headers: map[string]string{"Transfer-Encoding": "x"}}, "headers"},
		{"ReservedWebhookSignature", herald.Message{Topic: "t", Headers: map[string]string{"webhook-signature": "x"}}, "headers"},
	}
	for _, tc := range bad {
		t.Run("Refuses"+tc.name, func(t *testing.T) {
			t.Parallel()
			good := herald.Message{Topic: "fine"}
			_, err := herald.Prepare([]herald.Message{good, tc.msg}, 10)
			require.Error(t, err)
			require.True(t, errors.Is(err, herald.ErrInvalidMessage))
			var ve *herald.ValidationError
			require.True(t, errors.As(err, &ve))
			require.Equal(t, 1, ve.Index)
			require.Equal(t, tc.field, ve.Field)
		})
	}

	t.Run("AcceptsPayloadAtTheCap", func(t *testing.T) {
		t.Parallel()
		_, err := herald.Prepare([]herald.Message{{Topic: "t", Payload: make([]byte, herald.DefaultMaxPayloadBytes)}}, 0)
		require.NoError(t, err)
		_, err = herald.Prepare([]herald.Message{{Topic: "t", Payload: make([]byte, herald.DefaultMaxPayloadBytes+1)}}, 0)
		require.ErrorIs(t, err, herald.ErrInvalidMessage)
	})

	t.Run("AcceptsTraceContextHeaders", func(t *testing.T) {
		t.Parallel()
		_, err := herald.Prepare([]herald.Message{{Topic: "t", Headers: map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"X-Tenant":    "acme",
		}}}, 0)
		require.NoError(t, err)
	})
}

func FuzzValidateHeaderName(f *testing.F) {
	for _, s := range []string{"X-Tenant", "Nats-Msg-Id", "a\r\nb", "", "CC", "traceparent"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if herald.ValidateHeaderName(name) != nil {
			return
		}
		// An accepted name is safe to put on any broker's wire.
		require.NotEmpty(t, name)
		require.False(t, strings.ContainsAny(name, "\r\n\x00 :"), "accepted %q", name)
		lower := strings.ToLower(name)
		require.False(t, strings.HasPrefix(lower, "nats-") || strings.HasPrefix(lower, "herald-"), "accepted %q", name)
	})
}

func TestWriterAddsContextHeadersWithoutOverriding(t *testing.T) {
	var got []herald.Message
	w, err := herald.NewWriter[int](insertFunc(func(_ context.Context, _ int, msgs []herald.Message) error {
		got = msgs
		return nil
	}), nil)
	require.NoError(t, err)
	type key struct{}
	w = w.WithContextHeaders(func(ctx context.Context) map[string]string {
		tp, _ := ctx.Value(key{}).(string)
		if tp == "" {
			return nil
		}
		return map[string]string{"traceparent": tp, "tracestate": "vendor=1"}
	})
	ctx := context.WithValue(context.Background(), key{}, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	own := map[string]string{"tracestate": "mine=2"}
	require.NoError(t, w.WriteTx(ctx, 0, herald.Message{Topic: "t", Headers: own}, herald.Message{Topic: "t"}))
	require.Equal(t, map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "mine=2"},
		got[0].Headers, "a header the message sets wins")
	require.Equal(t, "vendor=1", got[1].Headers["tracestate"])
	require.Equal(t, map[string]string{"tracestate": "mine=2"}, own, "the caller's map is not changed")

	require.NoError(t, w.WriteTx(context.Background(), 0, herald.Message{Topic: "t"}))
	require.Empty(t, got[0].Headers, "no context, no headers")
}

type insertFunc func(ctx context.Context, tx int, msgs []herald.Message) error

func (f insertFunc) InsertTx(ctx context.Context, tx int, msgs []herald.Message) error {
	return f(ctx, tx, msgs)
}
