package heraldce_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

var created = time.Date(2026, 3, 4, 5, 6, 7, 891000000, time.UTC)

func envelope(payload string, headers map[string]string) *herald.Envelope {
	return &herald.Envelope{
		Message: herald.Message{
			ID: "0195b3a0-7c1e-7000-8000-000000000001", Topic: "orders", Key: "k-42",
			Type: "order.placed", AggregateType: "order", AggregateID: "42",
			EventVersion: 3, AggregateVersion: 42,
			Payload: []byte(payload), Headers: headers,
		},
		CreatedAt: created,
	}
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// checkSDKEvent asserts what the official SDK reads from a Herald event.
func checkSDKEvent(t *testing.T, e *event.Event, env *herald.Envelope, source string) {
	t.Helper()
	require.NoError(t, e.Validate())
	require.Equal(t, "1.0", e.SpecVersion())
	require.Equal(t, env.ID, e.ID())
	require.Equal(t, env.Type, e.Type())
	require.Equal(t, source, e.Source())
	require.Equal(t, env.AggregateID, e.Subject())
	require.True(t, env.CreatedAt.Equal(e.Time()), "time %s", e.Time())
	ext := e.Extensions()
	require.Equal(t, env.Topic, ext[heraldce.ExtTopic])
	require.Equal(t, env.Key, ext[heraldce.ExtKey])
	require.Equal(t, env.AggregateType, ext[heraldce.ExtAggregateType])
	require.Equal(t, "3", ext[heraldce.ExtEventVersion])
	require.Equal(t, "42", ext[heraldce.ExtAggregateVersion])
}

func TestHTTPBinaryIsReadByTheSDK(t *testing.T) {
	cfg := &heraldce.Config{Source: "/shop/orders"}
	env := envelope(`{"total": 12}`, map[string]string{"Content-Type": "application/json", "traceparent": traceparent, "X-Tenant": "t1"})
	h := http.Header{}
	cfg.HTTPBinary(env, func(name, value string) { h.Set(name, value) })
	heraldce.ProducerHeaders(env, func(name, value string) { h.Set(name, value) })

	e, err := binding.ToEvent(context.Background(), cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(env.Payload))))
	require.NoError(t, err)
	checkSDKEvent(t, e, env, cfg.Source)
	require.Equal(t, "application/json", e.DataContentType())
	require.Equal(t, env.Payload, e.Data())
	require.Equal(t, traceparent, e.Extensions()["traceparent"])

	back, err := heraldce.ParseHTTP(h, env.Payload)
	require.NoError(t, err)
	want := env.Message // HTTP header names come back canonical
	want.Headers = map[string]string{"Content-Type": "application/json", "Traceparent": traceparent, "X-Tenant": "t1"}
	require.Equal(t, want, back)
}

func TestStructuredJSONIsReadByTheSDK(t *testing.T) {
	cfg := &heraldce.Config{Source: "https://shop.example/orders", Mode: heraldce.Structured}
	for _, tc := range []struct {
		name, payload, contentType string
		asJSON                     bool
	}{
		{"JSONPayloadIsDataByteForByte", `{"total": 12,  "items":[1]}`, "application/json; charset=utf-8", true},
		{"NoContentTypeAndJSONIsData", `[1,2]`, "", true},
		{"BinaryPayloadIsDataBase64", "\x00\xffbin", "application/octet-stream", false},
		{"InvalidJSONIsDataBase64", `{"total":`, "application/json", false},
		{"SpaceAroundJSONIsDataBase64", ` {} `, "application/json", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := map[string]string{"traceparent": traceparent, "tracestate": "a=b"}
			if tc.contentType != "" {
				headers["Content-Type"] = tc.contentType
			}
			env := envelope(tc.payload, headers)
			body := cfg.Structured(env)
			if tc.asJSON {
				require.Contains(t, string(body), `"data":`+tc.payload)
			} else {
				require.Contains(t, string(body), `"data_base64":"`+base64.StdEncoding.EncodeToString([]byte(tc.payload))+`"`)
			}

			var e event.Event
			require.NoError(t, format.JSON.Unmarshal(body, &e))
			checkSDKEvent(t, &e, env, cfg.Source)
			require.Equal(t, tc.contentType, e.DataContentType())
			require.Equal(t, "a=b", e.Extensions()["tracestate"])
			if tc.asJSON {
				require.JSONEq(t, tc.payload, string(e.Data()))
			} else {
				require.Equal(t, []byte(tc.payload), e.Data())
			}

			back, err := heraldce.ParseStructured(nil, body)
			require.NoError(t, err)
			require.Equal(t, env.Message, back)
		})
	}
}

func TestEmptyTypeBecomesTheTopic(t *testing.T) {
	cfg := &heraldce.Config{Source: "/s", Mode: heraldce.Structured}
	env := envelope("{}", nil)
	env.Type, env.AggregateID, env.Key, env.AggregateType = "", "", "", ""
	env.CreatedAt = time.Time{}
	var e event.Event
	require.NoError(t, format.JSON.Unmarshal(cfg.Structured(env), &e))
	require.NoError(t, e.Validate())
	require.Equal(t, "orders", e.Type())
	require.Empty(t, e.Subject())
	require.NotContains(t, e.Extensions(), heraldce.ExtKey)
	require.NotContains(t, e.Extensions(), heraldce.ExtAggregateType)
	require.True(t, e.Time().IsZero())
}

// The event version is an extension of every event, the aggregate version
// only of an event that has one; both read back in every mode, and an
// event with none reads back as version 1 without an aggregate version.
func TestVersionsTravelAsExtensions(t *testing.T) {
	cfg := &heraldce.Config{Source: "/s"}
	for _, tc := range []struct {
		name         string
		event        int
		aggregate    int64
		wantEvent    int
		wantExts     map[string]string
		wantAbsentAV bool
	}{
		{"Set", 3, 42, 3, map[string]string{heraldce.ExtEventVersion: "3", heraldce.ExtAggregateVersion: "42"}, false},
		{"Largest", herald.MaxEventVersion, 1<<63 - 1, herald.MaxEventVersion,
			map[string]string{heraldce.ExtEventVersion: "2147483647", heraldce.ExtAggregateVersion: "9223372036854775807"}, false},
		{"None", 0, 0, 1, map[string]string{heraldce.ExtEventVersion: "1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := envelope(`{}`, nil)
			env.EventVersion, env.AggregateVersion = tc.event, tc.aggregate

			var e event.Event
			require.NoError(t, format.JSON.Unmarshal(cfg.Structured(env), &e))
			require.NoError(t, e.Validate())
			for name, v := range tc.wantExts {
				require.Equal(t, v, e.Extensions()[name], name)
			}
			if tc.wantAbsentAV {
				require.NotContains(t, e.Extensions(), heraldce.ExtAggregateVersion)
			}

			check := func(mode string, m herald.Message, err error) {
				t.Helper()
				require.NoError(t, err, mode)
				require.Equal(t, tc.wantEvent, m.EventVersion, mode)
				require.Equal(t, tc.aggregate, m.AggregateVersion, mode)
			}
			m, err := heraldce.ParseStructured(nil, cfg.Structured(env))
			check("structured", m, err)
			h := http.Header{}
			cfg.HTTPBinary(env, func(name, v string) { h.Set(name, v) })
			m, err = heraldce.ParseHTTP(h, env.Payload)
			check("http binary", m, err)
			var hs []heraldce.Header
			cfg.KafkaBinary(env, func(name, v string) { hs = append(hs, heraldce.Header{Name: name, Value: v}) })
			m, err = heraldce.ParseKafka(hs, env.Payload)
			check("kafka binary", m, err)
			hs = nil
			ct := cfg.Binary(env, heraldce.PrefixAMQP, func(name, v string) { hs = append(hs, heraldce.Header{Name: name, Value: v}) })
			m, err = heraldce.ParseBinary(heraldce.PrefixAMQP, hs, ct, env.Payload)
			check("amqp binary", m, err)
		})
	}
}

// A version written as a JSON number, as an SDK may re-encode an integer
// extension, reads as its string would.
func TestStructuredVersionsMayBeJSONNumbers(t *testing.T) {
	body := []byte(`{"specversion":"1.0","id":"0195b3a0-7c1e-7000-8000-000000000001","source":"/s","type":"t",` +
		`"heraldeventversion":4,"heraldaggversion":9}`)
	m, err := heraldce.ParseStructured(nil, body)
	require.NoError(t, err)
	require.Equal(t, 4, m.EventVersion)
	require.Equal(t, int64(9), m.AggregateVersion)
}

func TestMalformedVersionIsAnErrorNamingTheExtension(t *testing.T) {
	const id = "0195b3a0-7c1e-7000-8000-000000000001"
	for _, tc := range []struct{ name, ext, value, want string }{
		{"EventVersionNotANumber", "heraldeventversion", `"v2"`, heraldce.ExtEventVersion},
		{"EventVersionZero", "heraldeventversion", `"0"`, heraldce.ExtEventVersion},
		{"EventVersionOverInt32", "heraldeventversion", `2147483648`, heraldce.ExtEventVersion},
		{"EventVersionFraction", "heraldeventversion", `1.5`, heraldce.ExtEventVersion},
		{"EventVersionBool", "heraldeventversion", `true`, heraldce.ExtEventVersion},
		{"AggregateVersionNegative", "heraldaggversion", `"-1"`, heraldce.ExtAggregateVersion},
		{"AggregateVersionOverInt64", "heraldaggversion", `"9223372036854775808"`, heraldce.ExtAggregateVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"specversion":"1.0","id":"` + id + `","source":"/s","type":"t","` + tc.ext + `":` + tc.value + `}`
			_, err := heraldce.ParseStructured(nil, []byte(body))
			require.ErrorContains(t, err, "heraldce: extension "+tc.want)

			if tc.value[0] != '"' {
				return
			}
			raw := tc.value[1 : len(tc.value)-1]
			h := http.Header{"Ce-Id": {id}, "Ce-Specversion": {"1.0"}, "Ce-" + tc.ext: {raw}}
			_, err = heraldce.ParseHTTP(h, nil)
			require.ErrorContains(t, err, "heraldce: extension "+tc.want)
		})
	}
}

func TestHTTPValuesArePercentEncoded(t *testing.T) {
	cfg := &heraldce.Config{Source: "/s"}
	env := envelope("{}", nil)
	env.AggregateID = `Zoë "big" 100%`
	h := http.Header{}
	cfg.HTTPBinary(env, func(name, value string) { h.Set(name, value) })
	require.Equal(t, "Zo%C3%AB%20%22big%22%20100%25", h.Get("ce-subject"))
	back, err := heraldce.ParseHTTP(h, env.Payload)
	require.NoError(t, err)
	require.Equal(t, env.AggregateID, back.AggregateID)
}

// The bindings whose transport sdk-go has no module for here (AMQP,
// MQTT, Pub/Sub) read as their specifications say: prefixed names, the
// content type in the protocol's own field. The publishers' tests check
// what reaches a real broker.
func TestBinaryNamesAttributesWithTheBindingsPrefix(t *testing.T) {
	cfg := &heraldce.Config{Source: "/shop/orders"}
	env := envelope(`{"total":12}`, map[string]string{"Content-Type": "application/json", "traceparent": traceparent})
	for _, tc := range []struct{ prefix, id string }{
		{heraldce.PrefixAMQP, "cloudEvents:id"},
		{heraldce.PrefixPubSub, "ce-id"},
		{"", "id"},
	} {
		t.Run("Prefix"+tc.prefix, func(t *testing.T) {
			got := map[string]string{}
			ct := cfg.Binary(env, tc.prefix, func(name, value string) { got[name] = value })
			require.Equal(t, "application/json", ct)
			require.Equal(t, env.ID, got[tc.id])
			require.Equal(t, "1.0", got[tc.prefix+"specversion"])
			require.Equal(t, "/shop/orders", got[tc.prefix+"source"])
			require.Equal(t, "2026-03-04T05:06:07.891Z", got[tc.prefix+"time"])
			require.Equal(t, traceparent, got[tc.prefix+"traceparent"])
			require.NotContains(t, got, tc.prefix+"datacontenttype")

			var hs []heraldce.Header
			for name, v := range got {
				hs = append(hs, heraldce.Header{Name: name, Value: v})
			}
			if tc.prefix != "" {
				hs = append(hs, heraldce.Header{Name: "X-Tenant", Value: "t1"})
			}
			back, err := heraldce.ParseBinary(tc.prefix, hs, ct, env.Payload)
			require.NoError(t, err)
			want := env.Message
			want.Headers = map[string]string{"Content-Type": "application/json", "traceparent": traceparent}
			if tc.prefix != "" {
				want.Headers["X-Tenant"] = "t1"
			}
			require.Equal(t, want, back)
		})
	}
}

func TestStructuredDataIsBase64WhenThePayloadIsNotUTF8(t *testing.T) {
	cfg := &heraldce.Config{Source: "/s"}
	env := envelope("\"\xff\"", map[string]string{"Content-Type": "application/json"})
	body := cfg.Structured(env)
	require.Contains(t, string(body), `"data_base64":`)
	back, err := heraldce.ParseStructured(nil, body)
	require.NoError(t, err)
	require.Equal(t, env.Payload, back.Payload)
}

func TestProducerHeadersLeaveOutAttributeLookalikes(t *testing.T) {
	env := envelope("{}", map[string]string{
		"Content-Type": "application/json", "ce-id": "spoof", "CE_type": "spoof",
		"Herald-Id": "spoof", "X-Tenant": "t1", "traceparent": traceparent,
	})
	got := map[string]string{}
	heraldce.ProducerHeaders(env, func(name, value string) { got[name] = value })
	require.Equal(t, map[string]string{"X-Tenant": "t1", "traceparent": traceparent}, got)
}

func TestParseRefusesWhatHeraldDidNotSend(t *testing.T) {
	h := http.Header{"Ce-Id": {"not-a-uuid"}, "Ce-Specversion": {"1.0"}}
	_, err := heraldce.ParseHTTP(h, nil)
	require.ErrorIs(t, err, heraldce.ErrNotHerald)

	_, err = heraldce.ParseHTTP(http.Header{"X-Other": {"1"}}, nil)
	require.ErrorContains(t, err, "not a CloudEvent")

	h = http.Header{"Ce-Id": {"0195b3a0-7c1e-7000-8000-000000000001"}, "Ce-Specversion": {"0.3"}}
	_, err = heraldce.ParseHTTP(h, nil)
	require.ErrorContains(t, err, "specversion")

	_, err = heraldce.ParseStructured(nil, []byte("not json"))
	require.Error(t, err)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  heraldce.Config
		want string
	}{
		{heraldce.Config{Source: "/orders"}, ""},
		{heraldce.Config{Source: "https://shop.example/orders?x=1#f", Mode: heraldce.Structured}, ""},
		{heraldce.Config{Source: "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66", Mode: heraldce.Binary}, ""},
		{heraldce.Config{}, "P.Source is required"},
		{heraldce.Config{Source: "has space"}, "not a URI-reference"},
		{heraldce.Config{Source: "/a<b>"}, "not a URI-reference"},
		{heraldce.Config{Source: "http://[::1"}, "not a URI-reference"},
		{heraldce.Config{Source: "/s", Mode: "json"}, `P.Mode "json"`},
	} {
		err := tc.cfg.Validate("P")
		if tc.want == "" {
			require.NoError(t, err, tc.cfg.Source)
		} else {
			require.ErrorContains(t, err, tc.want, tc.cfg.Source)
		}
	}
}
