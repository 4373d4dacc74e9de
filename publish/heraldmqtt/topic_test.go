package heraldmqtt_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

func TestTopicNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		prefix     string
		mapping    heraldmqtt.TopicMapping
		allowEmpty bool
		topic      string
		want       string // "" when refused
		why        string // in the refusal
	}{
		{"VerbatimKeepsDots", "", heraldmqtt.TopicVerbatim, false, "orders.placed", "orders.placed", ""},
		{"PrefixComesFirst", "prod/", heraldmqtt.TopicVerbatim, false, "orders.placed", "prod/orders.placed", ""},
		{"DotsBecomeSlashes", "prod/", heraldmqtt.TopicDotsToSlashes, false, "orders.eu.placed", "prod/orders/eu/placed", ""},
		{"PrefixIsNotMapped", "prod.eu/", heraldmqtt.TopicDotsToSlashes, false, "orders.placed", "prod.eu/orders/placed", ""},
		{"SlashesStayLevels", "", heraldmqtt.TopicVerbatim, false, "orders/placed", "orders/placed", ""},
		{"UnicodeIsKept", "", heraldmqtt.TopicVerbatim, false, "caf\u00e9.\u2603", "caf\u00e9.\u2603", ""},
		{"SingleLevelWildcard", "", heraldmqtt.TopicVerbatim, false, "orders.+", "", "wildcard"},
		{"MultiLevelWildcard", "", heraldmqtt.TopicVerbatim, false, "orders#", "", "wildcard"},
		{"BrokerTopic", "", heraldmqtt.TopicVerbatim, false, "$SYS.x", "", "reserves"},
		{"DotsMakeAnEmptyLevel", "", heraldmqtt.TopicDotsToSlashes, false, "orders..placed", "", "empty level"},
		{"TrailingDotMakesAnEmptyLevel", "", heraldmqtt.TopicDotsToSlashes, false, "orders.", "", "empty level"},
		{"LeadingSlashIsAnEmptyLevel", "", heraldmqtt.TopicVerbatim, false, "/orders", "", "empty level"},
		{"PrefixAndTopicMakeAnEmptyLevel", "prod/", heraldmqtt.TopicVerbatim, false, "/orders", "", "empty level"},
		{"EmptyLevelsWhenAllowed", "", heraldmqtt.TopicDotsToSlashes, true, "orders..placed.", "orders//placed/", ""},
		{"ControlCharacter", "", heraldmqtt.TopicVerbatim, false, "orders\u0085", "", "U+0085"},
		{"NonCharacter", "", heraldmqtt.TopicVerbatim, false, "orders\ufffe", "", "non-character"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := heraldmqtt.TopicName(c.prefix, c.mapping, c.allowEmpty, c.topic)
			if c.want == "" {
				require.ErrorContains(t, err, c.why)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestTopicPrefixIsChecked(t *testing.T) {
	t.Parallel()
	for prefix, why := range map[string]string{
		"a/+/":           "wildcard",
		"#":              "wildcard",
		"$SYS/":          "reserves",
		"tab\there/":     "U+0009",
		"bad\xff":        "UTF-8",
		"nul\x00/":       "U+0000",
		"\uffff/":        "non-character",
		"ok/\u2603/":     "",
		"":               "",
		"prod.eu/":       "",
		"trailing//":     "", // a prefix may hold empty levels; the topic name is checked per event
		"\u00e9t\u00e9/": "",
	} {
		p, err := heraldmqtt.New(clientConfig(t, "127.0.0.1:1"), &heraldmqtt.Config{TopicPrefix: prefix})
		if why == "" {
			require.NoError(t, err, "prefix %q", prefix)
			require.NoError(t, p.Close())
			continue
		}
		require.ErrorContains(t, err, "Config.TopicPrefix", "prefix %q", prefix)
		require.ErrorContains(t, err, why, "prefix %q", prefix)
	}
}

// The size Publish checks against the broker's Maximum Packet Size is the
// packet's size on the wire, fixed header included, across the lengths
// where the remaining length takes one to four bytes.
func TestPacketSizeIsTheSizeOnTheWire(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 100, 127 - 20, 200, 16383 - 30, 16383, 20000, 2097151 - 40, 2097151, 2200000} {
		env := herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "t", Key: "k", Payload: bytes.Repeat([]byte("x"), n),
			Headers: map[string]string{"X-Tenant": "acme"}}}
		pub, err := heraldmqtt.Message("p/", &env)
		require.NoError(t, err)
		var wire bytes.Buffer
		_, err = pub.Packet().WriteTo(&wire)
		require.NoError(t, err)
		require.Equal(t, wire.Len(), heraldmqtt.PacketSize(pub), "payload of %d bytes", n)
	}
}

// Strings MQTT brokers refuse (Mosquitto closes the connection) fail the
// event alone, permanently, before anything is sent.
func TestStringsBrokersRefuseArePermanent(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]herald.Envelope{
		"TabInAHeader":          {Message: herald.Message{Topic: "t", Headers: map[string]string{"X-A": "a\tb"}}},
		"C1ControlInTheKey":     {Message: herald.Message{Topic: "t", Key: "k\u0085"}},
		"NonCharacterInTheType": {Message: herald.Message{Topic: "t", Type: "t\ufdd0"}},
		"WildcardInTheTopic":    {Message: herald.Message{Topic: "orders/#"}},
	} {
		env.ID = herald.NewID()
		_, err := heraldmqtt.Message("", &env)
		require.Error(t, err, name)
		require.True(t, herald.IsPermanent(err), "%s: %v", name, err)
		require.ErrorContains(t, err, env.ID, name)
	}
	ok := herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "t", Key: "caf\u00e9 \u2603", Type: "a b",
		Headers: map[string]string{"X-A": "spaces and \"quotes\" and \u00e9"}}}
	pub, err := heraldmqtt.Message("", &ok)
	require.NoError(t, err)
	require.Equal(t, "spaces and \"quotes\" and \u00e9", paho.UserProperties(pub.Properties.User).Get("X-A"))
	require.False(t, strings.ContainsRune(pub.Topic, '/'))
}
