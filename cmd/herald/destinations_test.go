package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"cloud.google.com/go/pubsub/v2"
	pubsubpb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald/internal/heraldtest"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// One relay, three brokers picked by URL scheme: orders.* to Kafka (the
// legacy.* topics in Debezium's shape), audit to Redis Streams, the rest to
// NATS JetStream by default.
func TestRelayRoutesTopicsToDestinationsByScheme(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := heraldtest.NATS(t)
	ns.CreateStream(t, "REST", "billing.>")
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.placed", "outbox.event.customer"))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		heraldtest.Unavailable(t, fmt.Sprintf("Redis is not reachable at 127.0.0.1:6379 (%v): start it with redis-server --daemonize yes", err))
	}
	stream := "audit-" + d.schema
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })

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
			"--default-destination", "events", "--log-level", "warn"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := heraldtest.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 4
	}, 30*time.Second, 20*time.Millisecond)
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
		heraldtest.Unavailable(t, fmt.Sprintf("RabbitMQ is not reachable at 127.0.0.1:5672 (%v): start it with rabbitmq-server -detached", err))
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
		err := heraldtest.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
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
	inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay")}
	ep, err := parseEndpoint(inv, "--destination hook", "hook", "https://u:pw@hooks.example.com:8443/services/T0/B0/XXXX?token=t")
	require.NoError(t, err)
	require.Equal(t, "https://hooks.example.com:8443", ep.display)
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
		err := heraldtest.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
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
