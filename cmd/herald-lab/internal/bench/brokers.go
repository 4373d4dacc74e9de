package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pubsubpb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/heraldkafka"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
	"github.com/herald-outbox/herald/publish/heraldnats"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
	"github.com/herald-outbox/herald/publish/heraldredis"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// drainSink is a destination the drain benchmark can publish to: open
// returns its publisher, a count of what it holds (nil when it cannot tell)
// and what to close.
type drainSink struct {
	name   string
	target float64 // events/s to reach; 0 for none
	note   string  // what the destination is, for the report
	open   func(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error)
	// keyOrder reads back what the destination holds, in its order, after
	// a drain; nil where the destination cannot be read back in order.
	keyOrder func(ctx context.Context, e *env) (*KeyOrder, error)
}

var drainSinks = []drainSink{
	{name: "jetstream", target: targetDrainJetStream, note: "embedded nats-server, file storage", open: openJetStream,
		keyOrder: jetStreamKeyOrder},
	{name: "discard", target: targetDrainDiscard, note: "a publisher that confirms at once",
		open: func(context.Context, *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
			return herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }), nil, func() {}, nil
		}},
	{name: "kafka", note: "franz-go against kfake, an in-process Kafka: no disk, no network", open: openKafka},
	{name: "redis", note: "the Redis server on 127.0.0.1:6379", open: openRedis},
	{name: "rabbitmq", note: "the RabbitMQ server on 127.0.0.1:5672, publisher confirms", open: openRabbit},
	{name: "mqtt", note: "the MQTT 5 broker (Mosquitto) on 127.0.0.1:1883, QoS 1, a PUBACK per event", open: openMQTT},
	{name: "webhook", note: "signed POSTs to an in-process HTTP server on loopback", open: openWebhook},
	{name: "sqs", note: "SendMessageBatch to a FIFO queue of moto_server (an AWS emulator) on loopback", open: openSQS},
	{name: "sns", note: "PublishBatch to a FIFO topic of moto_server on loopback, raw delivery to a FIFO queue", open: openSNS},
	{name: "pubsub", note: "the Pub/Sub client against pstest, its in-process fake server: no quotas, no disk", open: openPubSub},
}

// sinksNamed returns the sinks of a comma-separated list.
func sinksNamed(list string) ([]drainSink, error) {
	var out []drainSink
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range drainSinks {
			if s.name == name {
				out, found = append(out, s), true
			}
		}
		if !found {
			var names []string
			for _, s := range drainSinks {
				names = append(names, s.name)
			}
			return nil, fmt.Errorf("--to: unknown destination %q: want some of %s", name, strings.Join(names, ","))
		}
	}
	return out, nil
}

func openJetStream(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	pub, err := heraldnats.New(e.nats.pub, &heraldnats.Config{Logger: e.log, AtomicBatches: e.o.natsAtomic})
	if err != nil {
		return nil, nil, nil, err
	}
	// Every drain starts with an empty stream, as the other destinations
	// do, so that the count is this drain's.
	st, err := e.nats.js.Stream(ctx, drainStream)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := st.Purge(ctx); err != nil {
		return nil, nil, nil, fmt.Errorf("purging stream %s: %w", drainStream, err)
	}
	count := func(ctx context.Context) (int64, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return int64(info.State.Msgs), nil
	}
	return pub, count, func() {}, nil
}

func openKafka(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, drainSubject))
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := heraldkafka.NewClient(cluster.ListenAddrs())
	if err != nil {
		cluster.Close()
		return nil, nil, nil, err
	}
	pub, err := heraldkafka.New(client, &heraldkafka.Config{Logger: e.log})
	if err != nil {
		client.Close()
		cluster.Close()
		return nil, nil, nil, err
	}
	count := func(ctx context.Context) (int64, error) {
		cons, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(drainSubject),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			return 0, err
		}
		defer cons.Close()
		want := int64(e.o.events)
		var n int64
		for n < want && ctx.Err() == nil {
			fetches := cons.PollFetches(ctx)
			n += int64(fetches.NumRecords())
		}
		return n, nil
	}
	return pub, count, func() { client.Close(); cluster.Close() }, nil
}

func openRedis(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, nil, fmt.Errorf("redis on 127.0.0.1:6379: %w", err)
	}
	stream := "herald-bench:" + e.schema + ":"
	pub, err := heraldredis.New(rdb, &heraldredis.Config{StreamPrefix: stream, Logger: e.log})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	key := stream + drainSubject
	rdb.Del(ctx, key)
	count := func(ctx context.Context) (int64, error) { return rdb.XLen(ctx, key).Result() }
	return pub, count, func() { rdb.Del(context.Background(), key); _ = rdb.Close() }, nil
}

func openRabbit(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("RabbitMQ on 127.0.0.1:5672: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	// The default exchange routes each event to the queue named by its
	// topic.
	if _, err := ch.QueueDeclare(drainSubject, false, false, false, false, nil); err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	if _, err := ch.QueuePurge(drainSubject, false); err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	dial, err := heraldrabbit.Dialer(url, amqp.Config{})
	if err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	pub, err := heraldrabbit.New(dial, &heraldrabbit.Config{Logger: e.log})
	if err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	count := func(context.Context) (int64, error) {
		q, err := ch.QueueDeclarePassive(drainSubject, false, false, false, false, nil)
		return int64(q.Messages), err
	}
	return pub, count, func() {
		_ = pub.Close()
		_, _ = ch.QueueDelete(drainSubject, false, false, false)
		_ = conn.Close()
	}, nil
}

func openWebhook(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	pub, err := heraldwebhook.New(&heraldwebhook.Config{
		Default: heraldwebhook.Endpoint{URL: srv.URL + "/events"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		AllowedNetworks: []string{"127.0.0.0/8"}, MaxConcurrency: 64, Logger: e.log,
	})
	if err != nil {
		srv.Close()
		return nil, nil, nil, err
	}
	count := func(context.Context) (int64, error) { return received.Load(), nil }
	return pub, count, func() { _ = pub.Close(); srv.Close() }, nil
}

// motoListening is the line moto_server logs once it listens.
var motoListening = regexp.MustCompile(`Running on (http://127\.0\.0\.1:[0-9]+)`)

// awsEmulator is moto_server, an emulator of SQS and SNS, on a random loopback
// port, and clients of it.
type awsEmulator struct {
	cmd       *exec.Cmd
	dir       string
	transport *http.Transport
	sqs       *sqs.Client
	sns       *sns.Client
}

// startMoto starts moto_server (from PATH, or HERALD_BENCH_MOTO) and waits
// until it listens.
func startMoto(ctx context.Context) (*awsEmulator, error) {
	bin := os.Getenv("HERALD_BENCH_MOTO")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("moto_server"); err != nil {
			return nil, fmt.Errorf("moto_server, an AWS emulator, is not in PATH (install the Python package moto[server]): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "herald-bench-moto-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "moto.log")
	logf, err := os.Create(logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", "0")
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting moto_server: %w", err)
	}
	a := &awsEmulator{cmd: cmd, dir: dir}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := os.ReadFile(logPath)
		if m := motoListening.FindSubmatch(out); m != nil {
			a.connect(string(m[1]))
			return a, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			a.close()
			return nil, fmt.Errorf("moto_server not listening after 30s:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *awsEmulator) connect(endpoint string) {
	a.transport = &http.Transport{MaxIdleConnsPerHost: 64}
	cfg := aws.Config{
		Region: "eu-west-1", BaseEndpoint: aws.String(endpoint), HTTPClient: &http.Client{Transport: a.transport},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDBENCH", "bench", ""),
	}
	a.sqs, a.sns = sqs.NewFromConfig(cfg), sns.NewFromConfig(cfg)
}

func (a *awsEmulator) close() {
	if a.transport != nil {
		a.transport.CloseIdleConnections()
	}
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
	_ = os.RemoveAll(a.dir)
}

// queue creates a FIFO queue and returns its URL and a count of the
// messages it holds (moto's count is exact). FIFO, so that the queue drops
// the events the relay republishes after a publish timed out, as AWS does
// within five minutes: the count is then the backlog exactly, and a lost
// or surplus event shows.
func (a *awsEmulator) queue(ctx context.Context, name string) (string, func(context.Context) (int64, error), error) {
	q, err := a.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil {
		return "", nil, fmt.Errorf("creating queue %s: %w", name, err)
	}
	url := aws.ToString(q.QueueUrl)
	count := func(ctx context.Context) (int64, error) {
		out, err := a.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)], 10, 64)
	}
	return url, count, nil
}

func openSQS(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	a, err := startMoto(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	url, count, err := a.queue(ctx, "herald-bench-drain.fifo")
	if err != nil {
		a.close()
		return nil, nil, nil, err
	}
	pub, err := heraldaws.NewSQS(a.sqs, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(url), Logger: e.log})
	if err != nil {
		a.close()
		return nil, nil, nil, err
	}
	return pub, count, a.close, nil
}

func openSNS(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	a, err := startMoto(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
		a.close()
		return nil, nil, nil, err
	}
	url, count, err := a.queue(ctx, "herald-bench-drain.fifo")
	if err != nil {
		return fail(err)
	}
	topic, err := a.sns.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("herald-bench-drain.fifo"),
		Attributes: map[string]string{"FifoTopic": "true"}})
	if err != nil {
		return fail(fmt.Errorf("creating topic: %w", err))
	}
	attrs, err := a.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return fail(err)
	}
	_, err = a.sns.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"),
		Endpoint:   aws.String(attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]),
		Attributes: map[string]string{"RawMessageDelivery": "true"}})
	if err != nil {
		return fail(fmt.Errorf("subscribing the queue: %w", err))
	}
	pub, err := heraldaws.NewSNS(a.sns, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed(aws.ToString(topic.TopicArn)), Logger: e.log})
	if err != nil {
		return fail(err)
	}
	return pub, count, a.close, nil
}

// mqttAddr is the machine's MQTT broker.
const mqttAddr = "127.0.0.1:1883"

// mqttSinks numbers the drains' subscribers: a client id is unique on a
// broker.
var mqttSinks atomic.Int64

// openMQTT publishes to the machine's MQTT broker under a topic prefix of
// the drain's own, where a subscriber, subscribed first (a broker drops
// what no subscription wants), counts what arrives.
func openMQTT(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	prefix := "herald-bench/" + e.schema + "/"
	var received atomic.Int64
	arrived := make(chan struct{}, 1)
	conn, err := net.DialTimeout("tcp", mqttAddr, 5*time.Second)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("MQTT broker on %s: %w", mqttAddr, err)
	}
	sub := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(paho.PublishReceived) (bool, error) {
			received.Add(1)
			select {
			case arrived <- struct{}{}:
			default:
			}
			return true, nil
		},
	}})
	id := fmt.Sprintf("herald-bench-%s-%d", e.schema, mqttSinks.Add(1))
	if _, err := sub.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil {
		return nil, nil, nil, fmt.Errorf("MQTT broker on %s: %w", mqttAddr, err)
	}
	stopSub := func() { _ = sub.Disconnect(&paho.Disconnect{}) }
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: prefix + "#", QoS: 1}}}); err != nil {
		stopSub()
		return nil, nil, nil, fmt.Errorf("subscribing to %s#: %w", prefix, err)
	}
	server := &url.URL{Scheme: "mqtt", Host: mqttAddr}
	pub, err := heraldmqtt.New(autopaho.ClientConfig{ServerUrls: []*url.URL{server}}, &heraldmqtt.Config{TopicPrefix: prefix, Logger: e.log})
	if err != nil {
		stopSub()
		return nil, nil, nil, err
	}
	// Every event the broker acknowledged reaches the subscriber soon
	// after: wait until the backlog has, or for a quiet spell.
	count := func(ctx context.Context) (int64, error) {
		want := int64(e.o.events)
		for received.Load() < want {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				return received.Load(), nil
			case <-ctx.Done():
				return received.Load(), ctx.Err()
			}
		}
		return received.Load(), nil
	}
	return pub, count, func() { _ = pub.Close(); stopSub() }, nil
}

// openPubSub starts pstest, the Pub/Sub client library's in-process fake
// server, with the drain's topic and a subscription to it. The count is
// what a consumer receives: it pulls and acknowledges the subscription
// until it has the backlog, then once more to see any message beyond it.
func openPubSub(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	const project = "herald-bench"
	srv := pstest.NewServer()
	client, err := heraldpubsub.NewClient(ctx, project, heraldpubsub.EmulatorOptions(srv.Addr)...)
	if err != nil {
		_ = srv.Close()
		return nil, nil, nil, err
	}
	closeAll := func() { _ = client.Close(); _ = srv.Close() }
	topic := "projects/" + project + "/topics/" + drainSubject
	sub := "projects/" + project + "/subscriptions/herald-bench-drain"
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("creating topic %s: %w", topic, err)
	}
	// Unordered: the count needs no order, and an ordered subscription
	// hands out one message of a key per pull.
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, AckDeadlineSeconds: 600,
	}); err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("creating subscription %s: %w", sub, err)
	}
	pub, err := heraldpubsub.New(client, &heraldpubsub.Config{Project: project, Logger: e.log})
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	count := func(ctx context.Context) (int64, error) {
		want := int64(e.o.events)
		var n int64
		// With nothing to hand out, pstest answers empty after 500ms: stop
		// at the first empty answer once the backlog is in, or after 10
		// (5s with nothing new) short of it.
		for empty := 0; empty < 10; {
			resp, err := client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000})
			if err != nil {
				return n, err
			}
			got := resp.GetReceivedMessages()
			if len(got) == 0 {
				if n >= want {
					return n, nil
				}
				empty++
				continue
			}
			empty = 0
			ids := make([]string, len(got))
			for i, m := range got {
				ids[i] = m.GetAckId()
			}
			n += int64(len(got))
			if err := client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ids}); err != nil {
				return n, err
			}
		}
		return n, nil
	}
	return pub, count, func() { _ = pub.Close(); closeAll() }, nil
}
