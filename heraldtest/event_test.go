package heraldtest_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldtest"
)

func TestEventMatches(t *testing.T) {
	t.Parallel()
	env := herald.Envelope{Message: herald.Message{
		ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Topic: "orders.placed", Key: "o-1", Type: "order.placed",
		AggregateType: "order", AggregateID: "o-1",
		Payload: []byte(`{"id":"o-1","total":4200,"lines":[{"sku":"a","qty":2}],"paid":false,"note":null}`),
		Headers: map[string]string{"tenant": "acme", "traceparent": "00-abc-def-01"},
	}}

	t.Run("AnEmptyEventMatchesAnything", func(t *testing.T) {
		t.Parallel()
		require.True(t, heraldtest.Event{}.Matches(env))
	})

	t.Run("EveryFieldSetMustAgree", func(t *testing.T) {
		t.Parallel()
		require.True(t, heraldtest.Event{
			ID: "0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B", Topic: "orders.placed", Key: "o-1", Type: "order.placed",
			AggregateType: "order", AggregateID: "o-1", Payload: env.Payload,
			Headers: map[string]string{"tenant": "acme"},
		}.Matches(env), "ids compare without regard to case; headers are a subset")
		for name, e := range map[string]heraldtest.Event{
			"id":             {ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"},
			"topic":          {Topic: "orders"},
			"key":            {Key: "o-2"},
			"type":           {Type: "order.paid"},
			"aggregate type": {AggregateType: "cart"},
			"aggregate id":   {AggregateID: "o-2"},
			"payload":        {Payload: []byte(`{}`)},
			"empty payload":  {Payload: []byte{}},
			"header value":   {Headers: map[string]string{"tenant": "globex"}},
			"header absent":  {Headers: map[string]string{"region": "eu"}},
		} {
			require.False(t, e.Matches(env), name)
		}
	})

	t.Run("JSONIsComparedAsJSON", func(t *testing.T) {
		t.Parallel()
		for _, j := range []any{
			`{"note":null, "paid":false, "lines":[{"qty":2.0,"sku":"a"}], "total":4.2e3, "id":"o-1"}`,
			[]byte(` {"id":"o-1","total":4200,"lines":[{"sku":"a","qty":2}],"paid":false,"note":null} `),
			json.RawMessage(`{"id":"o-1","total":4200,"lines":[{"sku":"a","qty":20e-1}],"paid":false,"note":null}`),
			struct {
				ID    string           `json:"id"`
				Total int              `json:"total"`
				Lines []map[string]any `json:"lines"`
				Paid  bool             `json:"paid"`
				Note  *string          `json:"note"`
			}{"o-1", 4200, []map[string]any{{"sku": "a", "qty": 2}}, false, nil},
		} {
			require.True(t, heraldtest.Event{JSON: j}.Matches(env), "%v", j)
		}
		for _, j := range []string{
			`{"id":"o-1","total":4201,"lines":[{"sku":"a","qty":2}],"paid":false,"note":null}`,
			`{"id":"o-1","total":4200,"lines":[{"sku":"a","qty":2}],"paid":false}`,
			`{"id":"o-1","total":4200,"lines":[{"sku":"a","qty":2},{}],"paid":false,"note":null}`,
			`{"id":"o-1","total":"4200","lines":[{"sku":"a","qty":2}],"paid":false,"note":null}`,
			`{"id":"o-1","total":4200,"lines":[{"sku":"a","qty":2}],"paid":0,"note":null}`,
			`{"id":"o-1","total":4200,"lines":{},"paid":false,"note":null}`,
			`{"total":`, // not JSON: matches nothing
		} {
			require.False(t, heraldtest.Event{JSON: j}.Matches(env), j)
		}
		require.True(t, heraldtest.Event{JSON: `123456789012345678901234567890`}.Matches(
			herald.Envelope{Message: herald.Message{Payload: []byte(`1.23456789012345678901234567890e29`)}}),
			"numbers compare exactly, beyond a float64's precision")
		require.False(t, heraldtest.Event{JSON: `123456789012345678901234567890`}.Matches(
			herald.Envelope{Message: herald.Message{Payload: []byte(`123456789012345678901234567891`)}}))
		require.False(t, heraldtest.Event{JSON: `{}`}.Matches(
			herald.Envelope{Message: herald.Message{Payload: []byte(`{} {}`)}}), "a payload of two values is not JSON")
	})

	t.Run("StringShowsWhatIsSet", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "{any event}", heraldtest.Event{}.String())
		require.Equal(t, `{Topic: "orders.placed", Key: "o-1", JSON: {"total":1}, Headers: {"a": "1", "b": "2"}}`,
			heraldtest.Event{Topic: "orders.placed", Key: "o-1", JSON: map[string]int{"total": 1},
				Headers: map[string]string{"b": "2", "a": "1"}}.String())
		require.Equal(t, `{Payload: "\x00\xff"}`, heraldtest.Event{Payload: []byte{0, 0xff}}.String())
	})
}
