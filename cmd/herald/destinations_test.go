package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pubsubpb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// One relay, three brokers picked by URL scheme: orders.* to Kafka (the
// legacy.* topics in Debezium's shape), audit to Redis Streams, the rest to
// NATS JetStream by default.
func TestRelayRoutesTopicsToDestinationsByScheme(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	ns.CreateStream(t, "REST", "billing.>")
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.placed", "outbox.event.customer"))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("Redis is not reachable at 127.0.0.1:6379 (%v): start it with redis-server --daemonize yes", err))
	}
	stream := "audit-" + d.schema
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	addr := freeAddr(t)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, aggregate_type, aggregate_id, type, payload) VALUES
		('orders.placed', 'o1', 'order', 'o1', 'OrderPlaced', 'a'),
		('legacy.customer', 'c1', 'customer', 'c1', 'CustomerMoved', 'b'),
		('billing.invoiced', 'i1', '', '', '', 'c')`)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('`+stream+`', 'x', 'd')`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, nil, nil, append([]string{"relay",
			"--destination", "events=" + ns.URL(),
			"--destination", "kafka=kafka://" + kc.ListenAddrs()[0],
			"--destination", "audit=redis://127.0.0.1:6379/0?maxlen=1000",
			"--route", "orders.*=kafka", "--debezium-route", "legacy.>=kafka", "--route", stream + "=audit",
			"--default-destination", "events", "--log-level", "warn", "--admin-addr", addr}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 4
	}, 30*time.Second, 20*time.Millisecond)
	// The metrics name each event's destination, and time each one's calls.
	var metrics string
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/metrics")
		metrics = body
		return err == nil && code == 200 && strings.Contains(body, `herald_published_total{destination="events",topic="billing.invoiced"} 1`)
	}, 30*time.Second, 20*time.Millisecond)
	for _, want := range []string{
		`herald_published_total{destination="kafka",topic="orders.placed"} 1`,
		`herald_published_total{destination="kafka",topic="legacy.customer"} 1`,
		`herald_published_total{destination="audit",topic="` + stream + `"} 1`,
		`herald_destination_breaker{destination="audit",state="closed"} 1`,
	} {
		require.Contains(t, metrics, want)
	}
	for _, dest := range []string{"events", "kafka", "audit"} {
		require.Regexp(t, `herald_destination_publish_seconds_count\{destination="`+dest+`"\} [1-9]`, metrics)
	}
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)

	// Kafka: the order as is, the legacy event reshaped.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("orders.placed", "outbox.event.customer"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	got := map[string]*kgo.Record{}
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	for len(got) < 2 && fctx.Err() == nil {
		cl.PollFetches(fctx).EachRecord(func(rec *kgo.Record) { got[rec.Topic] = rec })
	}
	require.Equal(t, "o1", string(got["orders.placed"].Key))
	legacy := got["outbox.event.customer"]
	require.NotNil(t, legacy, "the Debezium route publishes to outbox.event.<aggregate_type>")
	require.Equal(t, "c1", string(legacy.Key))
	headers := map[string]string{}
	for _, h := range legacy.Headers {
		headers[h.Key] = string(h.Value)
	}
	require.Equal(t, "CustomerMoved", headers["type"])
	require.NotEmpty(t, headers["id"])

	// Redis and NATS.
	n, err := rdb.XLen(context.Background(), stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	js, err := jetstream.New(ns.Conn(t))
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), "REST")
	require.NoError(t, err)
	si, err := st.Info(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, si.State.Msgs, "billing.invoiced went to the default destination")
}

// amqp:// and http(s):// destinations: RabbitMQ through the default
// exchange (routing key = topic = queue), and a signed webhook, its secret
// and allow-list from the environment.
func TestRelayPublishesToRabbitMQAndWebhooks(t *testing.T) {
	t.Parallel()
	d := setup(t)
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("RabbitMQ is not reachable at 127.0.0.1:5672 (%v): start it with rabbitmq-server -detached", err))
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := "herald-cli-" + d.schema
	_, err = ch.QueueDeclare(queue, false, true, false, false, nil)
	require.NoError(t, err)
	// An exchange of the test's own, named in the destination's URL.
	exchange := "herald-cli-x-" + d.schema
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil))
	require.NoError(t, ch.QueueBind(queue, queue, exchange, false, nil))

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var (
		mu       sync.Mutex
		received []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := heraldwebhook.Verify(secret, r.Header, body, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		received = append(received, string(body))
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('`+queue+`', 'k', 'to rabbit'), ('hooks.order', 'k', 'to the webhook')`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, map[string]string{"HERALD_WEBHOOK_SECRET": secret, "HERALD_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8"}, nil,
			append([]string{"relay", "--destination", "rabbit=amqp://guest:guest@127.0.0.1:5672/?exchange=" + exchange,
				"--destination", "hook=" + hook.URL + "/herald", "--route", queue + "=rabbit", "--route", "hooks.*=hook",
				"--log-level", "warn"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 2
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stderr, secret)

	msg, ok, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.True(t, ok, "the event is in the queue")
	require.Equal(t, "to rabbit", string(msg.Body))
	require.True(t, msg.DeliveryMode == amqp.Persistent)
	require.Equal(t, exchange, msg.Exchange, "published to the exchange the URL names")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"to the webhook"}, received, "one signed POST")
}

// A webhook URL's path or query is often its credential: the relay shows
// the origin only.
func TestWebhookDestinationIsShownByItsOrigin(t *testing.T) {
	t.Parallel()
	inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay"), getenv: func(name string) (string, bool) {
		if name == webhookSecretEnv {
			return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true
		}
		return "", false
	}}
	ep, err := parseEndpoint(inv, "--destination hook", "hook", "https://u:pw@hooks.example.com:8443/services/T0/B0/XXXX?token=t")
	require.NoError(t, err)
	require.Equal(t, "https://hooks.example.com:8443", ep.display)
}

// sqs:// and sns:// destinations against moto_server: one queue by name,
// and an SNS FIFO topic (its account found with STS) with a FIFO queue
// subscribed; credentials from the environment, never shown.
func TestRelayPublishesToSQSAndSNS(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	d := setup(t)
	moto := testenv.Moto(t)
	const secret = "aws-Secret-Key-0123456789"
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	cfg := aws.Config{
		Region: "eu-west-1", BaseEndpoint: aws.String(moto.URL), HTTPClient: &http.Client{Transport: transport},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", secret, ""),
	}
	sq, sn := sqs.NewFromConfig(cfg), sns.NewFromConfig(cfg)
	ctx := t.Context()
	queue := "orders-" + d.schema
	q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queue)})
	require.NoError(t, err)
	topic := "billing-" + d.schema + ".fifo"
	tp, err := sn.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(topic), Attributes: map[string]string{"FifoTopic": "true"}})
	require.NoError(t, err)
	sub, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("sub-" + topic), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	subAttrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: sub.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{"QueueArn"}})
	require.NoError(t, err)
	_, err = sn.Subscribe(ctx, &sns.SubscribeInput{TopicArn: tp.TopicArn, Protocol: aws.String("sqs"),
		Endpoint: aws.String(subAttrs.Attributes["QueueArn"]), Attributes: map[string]string{"RawMessageDelivery": "true"}})
	require.NoError(t, err)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, type, payload) VALUES
		('orders.placed', 'o1', 'OrderPlaced', '{"order":1}'), ('billing.invoiced', 'i1', 'Invoiced', 'invoice')`)
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(rctx, map[string]string{"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": secret}, nil,
			append([]string{"relay",
				"--destination", "q=sqs://" + queue + "?region=eu-west-1&endpoint=" + moto.URL,
				"--destination", "n=sns://" + topic + "?region=eu-west-1&endpoint=" + moto.URL + "&max_message_bytes=65536",
				"--route", "orders.*=q", "--route", "billing.*=n", "--log-level", "debug"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 2
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout+r.stderr, secret)

	for _, c := range []struct{ queueURL, topic, key, payload string }{
		{aws.ToString(q.QueueUrl), "orders.placed", "o1", `{"order":1}`},
		{aws.ToString(sub.QueueUrl), "billing.invoiced", "i1", "invoice"},
	} {
		out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(c.queueURL), MaxNumberOfMessages: 10,
			MessageAttributeNames: []string{"All"}})
		require.NoError(t, err)
		require.Len(t, out.Messages, 1, "one event in %s", c.queueURL)
		ev, err := heraldaws.Parse(out.Messages[0])
		require.NoError(t, err)
		require.Equal(t, c.topic, ev.Topic)
		require.Equal(t, c.key, ev.Key)
		require.Equal(t, c.payload, string(ev.Payload))
	}
}

// sqs:// and sns:// URLs are checked before anything connects, in one
// line naming the flag; a URL with credentials never echoes them.
func TestAWSDestinationURLsAreChecked(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-Secret"
	db := "postgres://127.0.0.1:1/db"
	for _, tc := range []struct{ name, url, message string }{
		{"UnknownOption", "sqs://orders?region=eu-west-1&visibility=30", `--destination q: sqs option "visibility" is not supported: use region, account, endpoint, max_message_bytes, claim_check, claim_threshold or claim_endpoint`},
		{"BadRegion", "sqs://orders?region=Europe", `region="Europe" is not an AWS region`},
		{"BadAccount", "sns://billing?account=42", `account="42" is not a 12-digit AWS account id`},
		{"BadQueueName", "sqs://orders.v2", `"orders.v2" is not an SQS queue name`},
		{"TopicWithPath", "sns://billing/x", "an sns:// URL is sns://TOPIC?region=...&account=...: no path"},
		{"QueueURLNotAWS", "sqs://example.com/123456789012/q", "an sqs:// URL is sqs://QUEUE?region=... or sqs://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE"},
		{"OptionTwice", "sqs://orders?region=eu-west-1&region=eu-west-2", `option "region" is given twice`},
		{"MaxMessageBytes", "sqs://orders?max_message_bytes=2000000", `max_message_bytes="2000000" is not a number of bytes`},
		{"EndpointNotHTTP", "sqs://orders?endpoint=ftp://127.0.0.1", "endpoint is not an http:// or https:// URL without credentials"},
		{"EndpointWithCredentials", "sqs://orders?endpoint=http://u:" + secret + "@127.0.0.1:1", "endpoint is not an http:// or https:// URL without credentials"},
		{"CredentialsInURL", "sns://AKID:" + secret + "@billing", "an sns:// URL takes no credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, "relay", "--db", db, "--destination", "q="+tc.url)
			require.Equal(t, 2, r.code, r)
			require.Contains(t, r.stderr, tc.message, r)
			require.NotContains(t, r.stdout+r.stderr, secret, "a secret reached the output")
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
		})
	}

	inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay")}
	for _, raw := range []string{
		"sqs://orders.fifo?region=eu-west-1&account=123456789012&endpoint=http://127.0.0.1:4566&max_message_bytes=1048576",
		"sqs://sqs.eu-west-1.amazonaws.com/123456789012/orders",
		"sns://billing_events?region=us-gov-west-1",
	} {
		ep, err := parseEndpoint(inv, "--destination q", "q", raw)
		require.NoError(t, err, raw)
		require.Equal(t, raw, ep.display)
	}
	ep, err := parseEndpoint(inv, "--destination q", "q", "sqs://sqs.eu-west-1.amazonaws.com/123456789012/orders")
	require.NoError(t, err)
	d, ok := ep.spec.Target().(*heraldaws.URLConfig)
	require.True(t, ok, "an sqs destination parses into a *heraldaws.URLConfig, not %T", ep.spec.Target())
	require.Equal(t, "sqs", d.Kind)
	require.Equal(t, "orders", d.Name)
	require.Equal(t, "eu-west-1", d.Region)
	require.Equal(t, "123456789012", d.Account)
}

// A queue that does not exist is waited for, as an unreachable broker is:
// it may be created after the relay starts.
func TestMissingQueueIsWaitedFor(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	moto := testenv.Moto(t)
	inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay"),
		getenv: func(name string) (string, bool) {
			v, ok := map[string]string{"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "test"}[name]
			return v, ok
		}}
	for _, raw := range []string{
		"sqs://missing?region=eu-west-1&endpoint=" + moto.URL,
		"sns://missing?region=eu-west-1&endpoint=" + moto.URL,
	} {
		ep, err := parseEndpoint(inv, "--destination q", "q", raw)
		require.NoError(t, err)
		_, _, err = openEndpoint(t.Context(), inv, slog.New(slog.DiscardHandler), "test", ep, nil)
		require.Error(t, err)
		require.True(t, isUnreachable(err), "%s: %v", raw, err)
		require.ErrorContains(t, err, "missing")
	}
}

// An mqtt:// destination's options are checked when the command line is
// read: one line naming the flag, no password, and nothing unknown let
// through.
func TestMQTTDestinationOptionsAreChecked(t *testing.T) {
	t.Parallel()
	const password = "mqtt-s3cret"
	for raw, want := range map[string]string{
		"mqtt://u:" + password + "@127.0.0.1:1883?topic-prefx=a/":             `option "topic-prefx" is not known: an mqtt(s):// URL takes topic-prefix`,
		"mqtt://u:" + password + "@127.0.0.1:1883/orders":                     "has no path",
		"mqtt://127.0.0.1?topic-mapping=slashes":                              `topic-mapping="slashes": use verbatim or dots-to-slashes`,
		"mqtt://127.0.0.1?topic-prefix=a/%2B/":                                "topic-prefix holds a wildcard",
		"mqtt://127.0.0.1?topic-prefix=$SYS/":                                 "topic-prefix starts with '$'",
		"mqtt://127.0.0.1?require-subscribers=maybe":                          `require-subscribers="maybe": use true or false`,
		"mqtt://127.0.0.1?max-packet-bytes=0":                                 "max-packet-bytes",
		"mqtt://127.0.0.1?keepalive=70000":                                    "keepalive",
		"mqtt://127.0.0.1?client-id=a/b":                                      "client-id",
		"mqtt://127.0.0.1?topic-prefix=a/&topic-prefix=b/":                    "option topic-prefix is given twice",
		"mqtt://127.0.0.1?ca=/etc/ssl/certs/ca-certificates.crt":              "option ca is for mqtts://",
		"mqtts://u:" + password + "@127.0.0.1?ca=/nonexistent/ca.pem":         "ca=/nonexistent/ca.pem: no such file",
		"mqtts://127.0.0.1?ca=" + url.QueryEscape(filepath.Join(t.TempDir())): "ca=",
	} {
		var stderr bytes.Buffer
		inv := &invocation{stderr: &redactor{w: &stderr}, flags: newFlagSet("relay"),
			getenv: func(string) (string, bool) { return "", false }}
		_, err := parseEndpoint(inv, "--destination mq", "mq", raw)
		require.Error(t, err, raw)
		msg := err.Error()
		require.Contains(t, msg, want, raw)
		require.True(t, strings.HasPrefix(msg, "--destination mq: "), "names the flag: %s", msg)
		require.NotContains(t, msg, "\n", "one line")
		require.NotContains(t, msg, password)
	}
	for _, raw := range []string{
		"mqtt://127.0.0.1",
		"mqtt://u:" + password + "@broker.example:1884/?topic-prefix=herald/&topic-mapping=dots-to-slashes&allow-empty-levels=true" +
			"&max-packet-bytes=65536&require-subscribers=true&client-id=relay-1&keepalive=15",
		"mqtts://broker.example",
	} {
		inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay"),
			getenv: func(string) (string, bool) { return "", false }}
		ep, err := parseEndpoint(inv, "--destination mq", "mq", raw)
		require.NoError(t, err, raw)
		require.Equal(t, "mqtt", ep.kind)
		require.NotContains(t, ep.display, password)
	}
}

// The URL's options reach the client and the publisher: credentials as
// the CONNECT's user name and password (not in the server URL, which
// autopaho quotes in errors), the password from the destination's
// variable, the default ports, the TLS roots of ca=.
func TestMQTTDestinationConfiguresClientAndPublisher(t *testing.T) {
	t.Parallel()
	const password = "from-the-variable-0042"
	inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay"),
		getenv: func(name string) (string, bool) {
			if name == "HERALD_DESTINATION_DEVICES_PASSWORD" {
				return password, true
			}
			return "", false
		}}
	target := func(t *testing.T, name, raw string) *heraldmqtt.URLConfig {
		t.Helper()
		ep, err := parseEndpoint(inv, "--destination "+name, name, raw)
		require.NoError(t, err)
		c, ok := ep.spec.Target().(*heraldmqtt.URLConfig)
		require.True(t, ok, "an mqtt destination parses into a *heraldmqtt.URLConfig, not %T", ep.spec.Target())
		return c
	}
	c := target(t, "mq", "mqtt://relay:pa%2Fss@broker.example/?topic-prefix=herald/&topic-mapping=dots-to-slashes"+
		"&allow-empty-levels=true&max-packet-bytes=65536&require-subscribers=true&client-id=relay-1&keepalive=15")
	require.Equal(t, "mqtt://broker.example:1883", c.Client.ServerUrls[0].String())
	require.Equal(t, "relay", c.Client.ConnectUsername)
	require.Equal(t, []byte("pa/ss"), c.Client.ConnectPassword)
	require.Equal(t, "relay-1", c.Client.ClientID)
	require.EqualValues(t, 15, c.Client.KeepAlive)
	require.Equal(t, heraldmqtt.Config{TopicPrefix: "herald/", TopicMapping: heraldmqtt.TopicDotsToSlashes,
		AllowEmptyLevels: true, MaxPacketBytes: 65536, RequireSubscribers: true}, c.Config)

	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, selfSignedPEM(t), 0o600))
	c = target(t, "devices", "mqtts://relay@broker.example?ca="+url.QueryEscape(ca))
	require.Equal(t, "mqtts://broker.example:8883", c.Client.ServerUrls[0].String())
	require.Equal(t, "broker.example", c.Client.TlsCfg.ServerName)
	require.NotNil(t, c.Client.TlsCfg.RootCAs, "the roots of ca=, not the system's")
	require.Equal(t, []byte(password), c.Client.ConnectPassword, "the password from the destination's variable")
}

// selfSignedPEM is a throwaway CA certificate in PEM.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// An mqtt:// destination end to end: the relay publishes each row to the
// machine's Mosquitto at QoS 1, the topic mapped by the URL's options, and
// marks it published once the broker's PUBACK came.
func TestRelayPublishesToMQTT(t *testing.T) {
	t.Parallel()
	d := setup(t)
	prefix := "herald-cli/" + d.schema + "/"
	received := make(chan *paho.Publish, 10)
	conn, err := net.DialTimeout("tcp", "127.0.0.1:1883", 5*time.Second)
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("Mosquitto is not reachable at 127.0.0.1:1883 (%v): start it with mosquitto -d -c /etc/mosquitto/mosquitto.conf", err))
	}
	sub := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { received <- pr.Packet; return true, nil },
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = sub.Connect(ctx, &paho.Connect{ClientID: "herald-cli-" + d.schema, CleanStart: true, KeepAlive: 30})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Disconnect(&paho.Disconnect{}) })
	_, err = sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: prefix + "#", QoS: 1}}})
	require.NoError(t, err)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders.placed', 'o1', 'to mqtt')`)
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(rctx, nil, nil, append([]string{"relay",
			"--destination", "mq=mqtt://127.0.0.1:1883?topic-prefix=" + url.QueryEscape(prefix) + "&topic-mapping=dots-to-slashes",
			"--log-level", "warn"}, d.flags...)...)
	}()
	var msg *paho.Publish
	select {
	case msg = <-received:
	case <-ctx.Done():
		require.FailNow(t, "no message reached the subscriber")
	}
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 1
	}, 30*time.Second, 20*time.Millisecond)
	rcancel()
	r := <-done
	require.Equal(t, 0, r.code, r)

	require.Equal(t, prefix+"orders/placed", msg.Topic)
	require.EqualValues(t, 1, msg.QoS)
	m, err := heraldmqtt.Parse(msg)
	require.NoError(t, err)
	require.Equal(t, "orders.placed", m.Topic)
	require.Equal(t, "o1", m.Key)
	require.Equal(t, "to mqtt", string(m.Payload))
}

// An mqtts:// destination end to end: a Mosquitto of the test's own with a
// TLS listener whose certificate a throwaway CA signed; the relay trusts
// that CA through ca= and publishes, and a subscriber on the broker's
// plain listener receives the event.
func TestRelayPublishesToMQTTOverTLS(t *testing.T) {
	t.Parallel()
	d := setup(t)
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := testCertificates(t)
	for name, content := range map[string][]byte{"ca.pem": caPEM, "server.pem": certPEM, "server.key": keyPEM} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), content, 0o600))
	}
	tlsPort, plainPort := freeTCPPort(t), freeTCPPort(t)
	conf := []string{
		"listener " + plainPort + " 127.0.0.1",
		"listener " + tlsPort + " 127.0.0.1",
		"cafile " + filepath.Join(dir, "ca.pem"),
		"certfile " + filepath.Join(dir, "server.pem"),
		"keyfile " + filepath.Join(dir, "server.key"),
		"allow_anonymous true", "persistence false", "log_dest none",
	}
	if os.Geteuid() == 0 {
		conf = append(conf, "user root") // else it runs as mosquitto, who cannot read the test's files
	}
	startTestMosquitto(t, dir, conf, "127.0.0.1:"+plainPort)

	// The TLS settings the URL gives: the system's roots do not trust the
	// throwaway CA; ca= does.
	for query, trusted := range map[string]bool{"": false, "?ca=" + url.QueryEscape(filepath.Join(dir, "ca.pem")): true} {
		inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay"),
			getenv: func(string) (string, bool) { return "", false }}
		ep, err := parseEndpoint(inv, "--destination mq", "mq", "mqtts://127.0.0.1:"+tlsPort+query)
		require.NoError(t, err)
		client := ep.spec.Target().(*heraldmqtt.URLConfig).Client
		c, err := tls.Dial("tcp", client.ServerUrls[0].Host, client.TlsCfg)
		if !trusted {
			var unknown x509.UnknownAuthorityError
			require.ErrorAs(t, err, &unknown)
			continue
		}
		require.NoError(t, err)
		_ = c.Close()
	}

	received := make(chan *paho.Publish, 10)
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+plainPort, 5*time.Second)
	require.NoError(t, err)
	sub := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { received <- pr.Packet; return true, nil },
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = sub.Connect(ctx, &paho.Connect{ClientID: "herald-tls-sub", CleanStart: true, KeepAlive: 30})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Disconnect(&paho.Disconnect{}) })
	_, err = sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "tls/#", QoS: 1}}})
	require.NoError(t, err)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('secure', 'k', 'over tls')`)
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(rctx, nil, nil, append([]string{"relay",
			"--destination", "mq=mqtts://127.0.0.1:" + tlsPort + "?topic-prefix=tls/&ca=" + url.QueryEscape(filepath.Join(dir, "ca.pem")),
			"--log-level", "warn"}, d.flags...)...)
	}()
	select {
	case msg := <-received:
		require.Equal(t, "tls/secure", msg.Topic)
		require.Equal(t, "over tls", string(msg.Payload))
	case <-ctx.Done():
		rcancel()
		require.FailNow(t, "no message reached the subscriber", "%s", <-done)
	}
	rcancel()
	r := <-done
	require.Equal(t, 0, r.code, r)
}

// testCertificates returns a throwaway CA and a server certificate and key
// it signed for 127.0.0.1, in PEM.
func testCertificates(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err = x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// freeTCPPort returns a port of 127.0.0.1 that nothing listens on.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(testenv.FreePort(t))
}

// startTestMosquitto runs Mosquitto with the configuration lines conf,
// written in dir, until the test ends, and waits until ready (an address
// it listens on) takes connections. Without Mosquitto the test skips, or
// fails with CI=true.
func startTestMosquitto(t *testing.T, dir string, conf []string, ready string) {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto" // Debian's package puts it out of a user's PATH
		if _, statErr := os.Stat(bin); statErr != nil {
			testenv.Unavailable(t, "mosquitto is not installed (apt-get install mosquitto)")
		}
	}
	path := filepath.Join(dir, "mosquitto.conf")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600))
	cmd := exec.Command(bin, "-c", path)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", ready, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "mosquitto did not start")
}

// pubsub:// destinations: the relay publishes through the client to the
// emulator the URL's emulator= option names (here pstest, the library's
// in-process server), into the URL's project, with the topic prefix.
func TestRelayPublishesToPubSub(t *testing.T) {
	t.Parallel()
	d := setup(t)
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	const topic = "projects/herald-cli/topics/prod-orders.placed"
	_, err := srv.GServer.CreateTopic(context.Background(), &pubsubpb.Topic{Name: topic})
	require.NoError(t, err)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, type, payload, headers) VALUES
		('orders.placed', 'o1', 'OrderPlaced', 'first', '{"X-Tenant": "acme"}'), ('orders.placed', 'o1', 'OrderPlaced', 'second', '{}')`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, nil, nil, append([]string{"relay",
			"--destination", "gcp=pubsub://herald-cli?emulator=" + srv.Addr + "&prefix=prod-",
			"--log-level", "warn"}, d.flags...)...)
	}()
	waitPublished(t, d, 2)
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)

	msgs := srv.Messages()
	require.Len(t, msgs, 2)
	for i, want := range []string{"first", "second"} {
		m := msgs[i]
		require.Equal(t, topic, m.Topic)
		require.Equal(t, want, string(m.Data), "the key's order")
		require.Equal(t, "o1", m.OrderingKey)
		got, err := heraldpubsub.Parse(&pubsub.Message{Data: m.Data, Attributes: m.Attributes})
		require.NoError(t, err)
		require.Equal(t, "orders.placed", got.Topic)
		require.Equal(t, "OrderPlaced", got.Type)
	}
	require.Equal(t, "acme", msgs[0].Attributes["X-Tenant"])
}

// The relay finds the emulator as the client library does, through
// PUBSUB_EMULATOR_HOST, and waits for it while it does not answer.
func TestRelayWaitsForThePubSubEmulatorFromTheEnvironment(t *testing.T) {
	t.Parallel()
	d := setup(t)
	addr := freeAddr(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('audit', '', 'x')`)
	r := start(t, map[string]string{"PUBSUB_EMULATOR_HOST": addr},
		append([]string{"relay", "--publisher", "pubsub://herald-cli"}, d.flags...)...)
	require.Eventually(t, func() bool {
		return strings.Contains(r.stderr.String(), "attempt=2 ")
	}, 30*time.Second, 10*time.Millisecond, r.stderr.String())
	require.Contains(t, r.stderr.String(), `msg="waiting for the destination default before relaying"`)
	require.Contains(t, r.stderr.String(), "cannot reach destination default at pubsub://herald-cli")

	srv := pstest.NewServerWithAddress(addr)
	t.Cleanup(func() { _ = srv.Close() })
	_, err := srv.GServer.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/herald-cli/topics/audit"})
	require.NoError(t, err)
	waitPublished(t, d, 1)
	res := r.stop(t)
	require.Equal(t, 0, res.code, res)
	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "x", string(msgs[0].Data))
	require.Empty(t, msgs[0].OrderingKey, "no key, no ordering key")
}

// waitPublished waits until n rows of d's outbox are published.
func waitPublished(t *testing.T, d db, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == n
	}, 30*time.Second, 20*time.Millisecond)
}

// A pubsub:// URL's mistakes are refused before anything starts, in one
// line naming the flag or variable it came from.
func TestPubSubURLMistakesGiveOneClearLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		url     string
		message string
	}{
		{"UnknownOption", nil, "pubsub://my-project?endpoint=x:1", `--publisher: pubsub:// option "endpoint" is not supported: use emulator=HOST:PORT or prefix=PREFIX`},
		{"UnknownOptionFromEnv", map[string]string{"HERALD_PUBLISHER": "pubsub://my-project?ordering=on"}, "", `HERALD_PUBLISHER: pubsub:// option "ordering" is not supported`},
		{"OptionTwice", nil, "pubsub://my-project?prefix=a-&prefix=b-", "option prefix is given 2 times"},
		{"EmulatorWithoutPort", nil, "pubsub://my-project?emulator=localhost", `emulator="localhost" is not HOST:PORT`},
		{"Port", nil, "pubsub://my-project:8085", "pubsub://PROJECT takes no port"},
		{"Path", nil, "pubsub://my-project/orders", "pubsub://PROJECT takes no path"},
		{"UserInfo", nil, "pubsub://key:hunter2-Secret@my-project", "takes no user information"},
		{"NotAProjectID", nil, "pubsub://My_Project", `"My_Project" is not a Google Cloud project ID`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"relay", "--db", "postgres://127.0.0.1:1/db"}
			if tc.url != "" {
				args = append(args, "--publisher", tc.url)
			}
			r := cli(t, tc.env, args...)
			require.Equal(t, 2, r.code, r)
			require.Contains(t, r.stderr, tc.message, r)
			require.NotContains(t, r.stderr, "hunter2-Secret")
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
		})
	}
}

// --cloudevents-source sends every event as a CloudEvent: a webhook
// receives the binary binding's ce- headers, and reading the request back
// gives the event the relay published.
func TestRelaySendsCloudEventsToAWebhook(t *testing.T) {
	t.Parallel()
	d := setup(t)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	got := make(chan herald.Message, 1)
	headers := make(chan http.Header, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := heraldwebhook.Verify(secret, r.Header, body, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		msg, err := heraldce.ParseHTTP(r.Header, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case got <- msg:
			headers <- r.Header.Clone()
		default:
		}
	}))
	t.Cleanup(hook.Close)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, type, aggregate_id, payload) VALUES ('hooks.order', 'k', 'order.placed', 'order-7', '{"n":1}')`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, map[string]string{"HERALD_WEBHOOK_SECRET": secret, "HERALD_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8",
			"HERALD_CLOUDEVENTS_SOURCE": "/shop/orders"}, nil,
			append([]string{"relay", "--publisher", hook.URL + "/herald", "--cloudevents-mode", "binary", "--log-level", "warn"}, d.flags...)...)
	}()
	var msg herald.Message
	select {
	case msg = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no CloudEvent reached the webhook")
	}
	h := <-headers
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "/shop/orders", h.Get("ce-source"))
	require.Equal(t, "order.placed", h.Get("ce-type"))
	require.Equal(t, "1.0", h.Get("ce-specversion"))
	require.Equal(t, msg.ID, h.Get("ce-id"))
	require.Equal(t, "order-7", msg.AggregateID)
	require.Equal(t, "hooks.order", msg.Topic)
	require.JSONEq(t, `{"n":1}`, string(msg.Payload))
}

// CloudEvents options are checked with the rest of the command line.
func TestCloudEventsOptionsAreChecked(t *testing.T) {
	t.Parallel()
	db := "postgres://127.0.0.1:1/db"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ModeWithoutSource", []string{"--publisher", "nats://127.0.0.1:1", "--cloudevents-mode", "binary"},
			"herald: --cloudevents-mode goes with --cloudevents-source"},
		{"SourceNotAURI", []string{"--publisher", "nats://127.0.0.1:1", "--cloudevents-source", "a b"},
			`herald: --cloudevents-source "a b" is not a URI-reference`},
		{"UnknownMode", []string{"--publisher", "kafka://127.0.0.1:1", "--cloudevents-source", "/s", "--cloudevents-mode", "packed"},
			`herald: --cloudevents-mode "packed" is neither "binary" nor "structured"`},
		{"NATSBinary", []string{"--publisher", "nats://127.0.0.1:1", "--cloudevents-source", "/s", "--cloudevents-mode", "binary"},
			"herald: --cloudevents-mode: destination default is NATS, which takes CloudEvents in structured mode only"},
		{"SQSBinary", []string{"--destination", "r=redis://127.0.0.1:1/0", "--destination", "q=sqs://orders?region=eu-west-1",
			"--route", "a=r", "--route", "b=q", "--cloudevents-source", "/s", "--cloudevents-mode", "binary"},
			"herald: --cloudevents-mode: destination q is SQS, which takes CloudEvents in structured mode only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, append([]string{"relay", "--db", db}, tc.args...)...)
			require.Equal(t, exitUsage, r.code, r.String())
			require.Equal(t, 1, countLines(r.stderr), r.stderr)
			require.Contains(t, r.stderr, tc.want)
		})
	}
}
