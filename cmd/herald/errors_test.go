package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// goField matches what a daemon user cannot set: a Go struct field or type
// (Config.AllowedNetworks, RelayConfig.BatchSize, heraldnats.Config,
// autopaho.ClientConfig.ServerUrls).
var goField = regexp.MustCompile(`\b(Config|RelayConfig|SQSConfig|SNSConfig|ClientConfig|Options|Endpoint|Destination|Route)s?(\[[^\]]*\])?\.[A-Z]|\bherald[a-z]*\.[A-Z][A-Za-z]+`)

// Every refusal of the daemon's configuration names what the user sets (a
// flag, a variable, a URL option), never a Go field of a library it
// configures: a class of defect, so the inputs cover every destination
// kind's options and the relay's flags.
func TestRefusalsNameFlagsAndVariablesNeverGoFields(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	db := "postgres://127.0.0.1:1/db"
	relay := func(pub string, args ...string) []string {
		return append([]string{"relay", "--db", db, "--publisher", pub}, args...)
	}
	nats := "nats://127.0.0.1:1"
	hook := map[string]string{"HERALD_WEBHOOK_SECRET": secret}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // the flag, variable or option the message names
	}{
		{"route pattern", nil, relay(nats, "--route", "orders.>x=default"), "--route"},
		{"Debezium route pattern", nil, relay(nats, "--debezium-route", "b>=default"), "--debezium-route"},
		{"route pattern from the environment", map[string]string{"HERALD_ROUTE": "a.>b=default"}, relay(nats), "HERALD_ROUTE"},
		{"webhook network", map[string]string{"HERALD_WEBHOOK_SECRET": secret, "HERALD_WEBHOOK_ALLOW_NETWORKS": "10.0.0.0/8,notacidr"},
			relay("https://hooks.example/x"), "HERALD_WEBHOOK_ALLOW_NETWORKS"},
		{"webhook without secret", nil, relay("https://hooks.example/x"), "HERALD_WEBHOOK_SECRET"},
		{"webhook bad secret", map[string]string{"HERALD_WEBHOOK_SECRET": "whsec_x"}, relay("https://hooks.example/x"), "HERALD_WEBHOOK_SECRET"},
		{"webhook CloudEvents", hook, relay("https://hooks.example/x", "--cloudevents-source", "::bad"), "--cloudevents-source"},
		{"CloudEvents mode", hook, relay("https://hooks.example/x", "--cloudevents-source", "/s", "--cloudevents-mode", "both"), "--cloudevents-mode"},
		{"NATS subject prefix", nil, relay(nats, "--nats-subject-prefix", "a..b"), "--nats-subject-prefix"},
		{"NATS pending", nil, relay(nats, "--nats-max-pending", "0"), "--nats-max-pending"},
		{"NATS stream subjects", nil, relay(nats, "--nats-stream-subjects", "x"), "--nats-stream-subjects"},
		{"MQTT topic prefix", nil, relay("mqtt://127.0.0.1:1?topic-prefix=$sys"), "topic-prefix"},
		{"MQTT wildcard prefix", nil, relay("mqtt://127.0.0.1:1?topic-prefix=a/%2B"), "topic-prefix"},
		{"MQTT packet size", nil, relay("mqtt://127.0.0.1:1?max-packet-bytes=0"), "max-packet-bytes"},
		{"MQTT mapping", nil, relay("mqtt://127.0.0.1:1?topic-mapping=x"), "topic-mapping"},
		{"MQTT CA", nil, relay("mqtts://127.0.0.1:1?ca=/nonexistent"), "ca="},
		{"Pub/Sub prefix", nil, relay("pubsub://my-project-1?prefix=a%20b"), "prefix"},
		{"Pub/Sub long prefix", nil, relay("pubsub://my-project-1?prefix=" + strings.Repeat("p", 300)), "prefix"},
		{"Pub/Sub option", nil, relay("pubsub://my-project-1?bogus=1"), "bogus"},
		{"SQS region", nil, relay("sqs://q?region=bad_region"), "region"},
		{"SNS size", nil, relay("sns://t?max_message_bytes=x"), "max_message_bytes"},
		{"SNS endpoint", nil, relay("sns://t?endpoint=ftp://x"), "endpoint"},
		{"AMQP exchange", nil, relay("amqp://127.0.0.1:1/?exchange=" + strings.Repeat("x", 256)), "exchange="},
		{"batch size", nil, relay(nats, "--batch-size", "0"), "--batch-size"},
		{"lease", nil, relay(nats, "--lease", "1ms"), "--lease"},
		{"retry cap", nil, relay(nats, "--retry-base", "10m", "--retry-cap", "1s"), "--retry-cap"},
		{"claim concurrency", nil, relay(nats, "--claim-concurrency", "9"), "--claim-concurrency"},
		{"max per key", nil, relay(nats, "--max-per-key", "-1"), "--max-per-key"},
		{"idle poll", nil, relay(nats, "--idle-poll-interval", "1ns"), "--idle-poll-interval"},
		{"unordered topics", nil, relay(nats, "--unordered-topics", ",,"), "--unordered-topics"},
		{"ordering", map[string]string{"HERALD_ORDERING": "weird"}, relay(nats), "HERALD_ORDERING"},
		{"admin token", map[string]string{"HERALD_ADMIN_TOKEN": "short"}, relay(nats, "--admin-addr", "127.0.0.1:0"), "HERALD_ADMIN_TOKEN"},
		{"admin address", nil, relay(nats, "--admin-addr", "nope"), "--admin-addr"},
		{"schema", nil, []string{"migrate", "--db", db, "--schema", "a b"}, "--schema"},
		{"table", map[string]string{"HERALD_TABLE": "1x"}, []string{"migrate", "--db", db}, "HERALD_TABLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := cliCtx(ctx, tc.env, nil, tc.args...)
			require.Equal(t, 2, r.code, "refused before the relay waits for anything: %s", r)
			require.NotRegexp(t, goField, r.stderr, "a daemon user cannot set a Go field")
			require.Contains(t, r.stderr, tc.want, r)
		})
	}
}
