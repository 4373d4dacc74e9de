package heraldce_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Any event a Writer accepts comes back from each mapping as it went in,
// but for what the mapping documents: an empty Type reads back as the
// topic, producer headers named like binding attributes are not sent, and
// the Content-Type travels as datacontenttype.
func FuzzRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, _ string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok || strings.EqualFold(header1, header2) {
			return // two spellings of one name: which one is Content-Type is not defined
		}
		want := expected(&env)
		cfg := &heraldce.Config{Source: "/fuzz"}

		var hs []heraldce.Header
		add := func(name, v string) { hs = append(hs, heraldce.Header{Name: name, Value: v}) }
		heraldce.ProducerHeaders(&env, add)
		got, err := heraldce.ParseStructured(hs, cfg.Structured(&env))
		require.NoError(t, err)
		requireSame(t, want, got, "structured")

		cfg.KafkaBinary(&env, add)
		got, err = heraldce.ParseKafka(hs, env.Payload)
		require.NoError(t, err)
		requireSame(t, want, got, "kafka binary")

		for _, prefix := range []string{heraldce.PrefixAMQP, heraldce.PrefixPubSub} {
			var bin []heraldce.Header
			heraldce.ProducerHeaders(&env, func(name, v string) { bin = append(bin, heraldce.Header{Name: name, Value: v}) })
			ct := cfg.Binary(&env, prefix, func(name, v string) { bin = append(bin, heraldce.Header{Name: name, Value: v}) })
			got, err = heraldce.ParseBinary(prefix, bin, ct, env.Payload)
			require.NoError(t, err)
			requireSame(t, want, got, prefix+" binary")
		}

		// MQTT's binary mode sends the attributes alone: compare those.
		var user []heraldce.Header
		ct := cfg.Binary(&env, "", func(name, v string) { user = append(user, heraldce.Header{Name: name, Value: v}) })
		got, err = heraldce.ParseBinary("", user, ct, env.Payload)
		require.NoError(t, err)
		mqttWant := want
		mqttWant.Headers, got.Headers = nil, nil
		requireSame(t, mqttWant, got, "mqtt binary")

		// HTTP canonicalizes header names: compare the attributes only.
		h := http.Header{}
		cfg.HTTPBinary(&env, func(name, v string) { h.Set(name, v) })
		got, err = heraldce.ParseHTTP(h, env.Payload)
		require.NoError(t, err)
		got.Headers, want.Headers = nil, nil
		requireSame(t, want, got, "http binary")
	})
}

func expected(env *herald.Envelope) herald.Message {
	want := env.Message
	if want.Type == "" {
		want.Type = want.Topic
	}
	want.Headers = nil
	for name, v := range env.Headers {
		lower := strings.ToLower(name)
		switch {
		case herald.ValidateHeaderName(name) != nil, strings.HasPrefix(lower, "ce-"), strings.HasPrefix(lower, "ce_"):
			continue
		case lower == "content-type":
			if v == "" {
				continue
			}
			name = "Content-Type"
		}
		if want.Headers == nil {
			want.Headers = map[string]string{}
		}
		want.Headers[name] = v
	}
	return want
}

func requireSame(t *testing.T, want, got herald.Message, mode string) {
	t.Helper()
	if len(want.Payload) == 0 && len(got.Payload) == 0 {
		want.Payload, got.Payload = nil, nil
	}
	require.Equal(t, want, got, mode)
}
