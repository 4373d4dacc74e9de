package heraldredis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldredis"
	"github.com/herald-outbox/herald/publish/publishertest"
)

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// redisAddr is the development machine's Redis server.
const redisAddr = "127.0.0.1:6379"

var streamSeq atomic.Int64

type bundle struct {
	rdb    *redis.Client
	prefix string // unique to the test; every stream it creates starts with it
}

// setup connects to the machine's Redis and gives the test a stream name
// prefix of its own, whose streams are deleted when the test ends. Without
// Redis the test skips, except with CI=true, where it fails.
func setup(t *testing.T) *bundle {
	t.Helper()
	rdb := connect(t, redisAddr)
	b := &bundle{rdb: rdb, prefix: fmt.Sprintf("herald-test:%d:%d:", time.Now().UnixNano(), streamSeq.Add(1))}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, b.prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("listing the test's streams: %v", err)
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("deleting the test's streams: %v", err)
			}
		}
	})
	return b
}

// connect returns a client of the server at addr, closed when the test
// ends, after checking that the server answers.
func connect(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		unavailable(t, fmt.Sprintf("Redis is not reachable at %s (%v); start it with `redis-server --daemonize yes`", addr, err))
	}
	return rdb
}

// unavailable skips the test for a missing service, or fails it on CI.
func unavailable(t *testing.T, why string) { t.Helper(); testenv.Unavailable(t, why) }

func (b *bundle) publisher(t *testing.T, cfg *heraldredis.Config) *heraldredis.Publisher {
	t.Helper()
	c := heraldredis.Config{StreamPrefix: b.prefix}
	if cfg != nil {
		c = *cfg
		c.StreamPrefix = b.prefix + cfg.StreamPrefix
	}
	p, err := heraldredis.New(b.rdb, &c)
	require.NoError(t, err)
	return p
}

// envelope is an event ordered when it has a key, as an ordered relay marks
// it.
func envelope(topic, key string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: topic, Key: key, Payload: []byte(`{}`)}, Attempt: 1,
		Ordered: key != ""}
}

func batchErrors(t *testing.T, err error, n int) []error {
	t.Helper()
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, n)
	return be.Errs
}

// entries returns every entry of a stream, parsed.
func (b *bundle) entries(t *testing.T, stream string) []herald.Message {
	t.Helper()
	raw, err := b.rdb.XRange(t.Context(), stream, "-", "+").Result()
	require.NoError(t, err)
	out := make([]herald.Message, len(raw))
	for i, m := range raw {
		out[i], err = heraldredis.Parse(m)
		require.NoError(t, err)
	}
	return out
}

func messageIDs(msgs []herald.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// conformanceMaxPayload is the publisher's payload limit in the suite.
// Redis's own limit (proto-max-bulk-len, at least 1 MiB) is enforced by
// dropping the connection, so the publisher refuses larger payloads itself.
const conformanceMaxPayload = 64 << 10

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance(t, nil)
}

// The same with CloudEvents on, in each mode: Parse gives back what the
// suite sent.
func TestConformanceCloudEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			conformance(t, &heraldce.Config{Source: "/conformance", Mode: mode})
		})
	}
}

func conformance(t *testing.T, ce *heraldce.Config) {
	b := setup(t)
	var topics atomic.Int64

	publishertest.Run(t, publishertest.Harness{
		// Redis Streams have no broker-side deduplication.
		Features: publishertest.Features{KeyOrder: true, Headers: true, PermanentTooLarge: true},
		New: func(t *testing.T) herald.Publisher {
			return b.publisher(t, &heraldredis.Config{MaxPayloadBytes: conformanceMaxPayload, CloudEvents: ce})
		},
		Topic: func(t *testing.T) string {
			return fmt.Sprintf("conformance.t%d", topics.Add(1))
		},
		Read: func(t *testing.T, topic string, n int) []publishertest.Received {
			return b.read(t, b.prefix+topic, n)
		},
		Unreachable: func(t *testing.T) herald.Publisher {
			// Nothing listens on port 1.
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			t.Cleanup(func() { _ = rdb.Close() })
			p, err := heraldredis.New(rdb, nil)
			require.NoError(t, err)
			return p
		},
		TooLarge: conformanceMaxPayload + 1,
	})
}

// read blocks (XREAD BLOCK, 10s in all) until n entries are in stream, then
// returns every entry the stream holds, in stream order.
func (b *bundle) read(t *testing.T, stream string, n int) []publishertest.Received {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	last, count := "0", 0
	for count < n {
		wait := time.Until(deadline)
		require.Positivef(t, wait, "only %d of %d entries arrived in %s", count, n, stream)
		res, err := b.rdb.XRead(t.Context(), &redis.XReadArgs{Streams: []string{stream, last}, Block: wait}).Result()
		if errors.Is(err, redis.Nil) {
			continue // the block timed out; the next turn fails the test
		}
		require.NoError(t, err)
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				count++
			}
		}
	}
	var got []publishertest.Received
	for _, m := range b.entries(t, stream) {
		got = append(got, publishertest.ReceivedOf(m))
	}
	return got
}

func TestPublish(t *testing.T) {
	t.Parallel()

	t.Run("ProducerHeadersCannotOverwriteEventFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		env := envelope("orders", "order-42")
		env.Type = "order.placed"
		env.AggregateType = "order"
		env.AggregateID = "42"
		env.EventVersion, env.AggregateVersion = 3, 42
		env.Payload = []byte{0, 0xff, 'p'}
		env.Headers = map[string]string{}
		for _, name := range []string{"id", "topic", "key", "type", "aggregate_type", "aggregate_id",
			"event_version", "aggregate_version", "headers", "payload"} {
			env.Headers[name] = "forged-" + name
		}
		for name := range env.Headers {
			require.NoError(t, herald.ValidateHeaderName(name), "a producer may use the header %q", name)
		}
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		raw, err := b.rdb.XRange(t.Context(), b.prefix+"orders", "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, raw, 1)
		headers := raw[0].Values["headers"]
		require.IsType(t, "", headers)
		require.JSONEq(t, `{"id":"forged-id","topic":"forged-topic","key":"forged-key","type":"forged-type",
			"aggregate_type":"forged-aggregate_type","aggregate_id":"forged-aggregate_id",
			"event_version":"forged-event_version","aggregate_version":"forged-aggregate_version",
			"headers":"forged-headers","payload":"forged-payload"}`, headers.(string))
		require.Equal(t, map[string]any{
			"id": env.ID, "topic": "orders", "key": "order-42", "type": "order.placed",
			"aggregate_type": "order", "aggregate_id": "42", "event_version": "3", "aggregate_version": "42",
			"headers": headers, "payload": "\x00\xffp",
		}, raw[0].Values)

		got, err := heraldredis.Parse(raw[0])
		require.NoError(t, err)
		require.Equal(t, env.Message, got)
	})

	t.Run("ReservedHeaderOfARawRowIsDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		// A row inserted with plain SQL, past the Writer's validation.
		env := envelope("orders", "k")
		env.Headers = map[string]string{"Herald-Id": herald.NewID(), "Nats-Msg-Id": "x", "X-Tenant": "acme"}
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		got := b.entries(t, b.prefix+"orders")
		require.Len(t, got, 1)
		require.Equal(t, env.ID, got[0].ID)
		require.Equal(t, map[string]string{"X-Tenant": "acme"}, got[0].Headers)
	})

	t.Run("OmitsEmptyOptionalFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		env := envelope("orders", "")
		env.Payload = nil
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		raw, err := b.rdb.XRange(t.Context(), b.prefix+"orders", "-", "+").Result()
		require.NoError(t, err)
		require.Len(t, raw, 1)
		require.Equal(t, map[string]any{"id": env.ID, "topic": "orders", "event_version": "1", "payload": ""}, raw[0].Values,
			"the event version is always there: no version is version 1")
	})

	t.Run("RedisErrorHoldsBackOnlyTheLaterEventsOfItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		// A string where a stream should be: XADD answers WRONGTYPE, a
		// per-command error that Redis follows with the next command.
		require.NoError(t, b.rdb.Set(t.Context(), b.prefix+"blocked", "not a stream", 0).Err())

		batch := []herald.Envelope{
			envelope("orders", "k"),  // 0: added
			envelope("orders", "j"),  // 1: added
			envelope("blocked", "k"), // 2: WRONGTYPE
			envelope("orders", "j"),  // 3: added
			envelope("orders", "k"),  // 4: held back
			envelope("other", "k"),   // 5: held back, though its stream is fine
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.NoError(t, errs[3])
		require.ErrorContains(t, errs[2], "WRONGTYPE")
		require.False(t, herald.IsPermanent(errs[2]), "a Redis error may be fixed by an operator: retry")
		for _, i := range []int{4, 5} {
			require.ErrorIs(t, errs[i], herald.ErrHeldBack, "event %d", i)
			require.ErrorContains(t, errs[i], batch[2].ID, "names the event it waits for")
		}

		require.Equal(t, []string{batch[0].ID, batch[1].ID, batch[3].ID}, messageIDs(b.entries(t, b.prefix+"orders")))
		n, err := b.rdb.Exists(t.Context(), b.prefix+"other").Result()
		require.NoError(t, err)
		require.Zero(t, n, "the held-back event was not sent")
	})

	t.Run("UnorderedEventIsSentAfterAFailedOneOfItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldredis.Config{MaxPayloadBytes: 8})
		require.NoError(t, b.rdb.Set(t.Context(), b.prefix+"blocked", "not a stream", 0).Err())

		// An unordered topic: the relay leaves Ordered false, though the
		// events have a key.
		batch := []herald.Envelope{
			envelope("blocked", "k"), // WRONGTYPE
			envelope("orders", "k"),  // refused before sending
			envelope("orders", "k"),
		}
		batch[1].Payload = []byte("123456789")
		for i := range batch {
			batch[i].Ordered = false
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.ErrorContains(t, errs[0], "WRONGTYPE")
		require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
		require.NoError(t, errs[2], "an unordered event is never held back")
		require.Equal(t, []string{batch[2].ID}, messageIDs(b.entries(t, b.prefix+"orders")))
	})

	t.Run("PayloadOverTheLimitIsPermanentAndNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldredis.Config{MaxPayloadBytes: 8})
		batch := []herald.Envelope{envelope("orders", "k"), envelope("orders", "k"), envelope("orders", "k")}
		batch[1].Payload = []byte("123456789")
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
		require.ErrorContains(t, errs[1], "Config.MaxPayloadBytes")
		require.ErrorIs(t, errs[2], herald.ErrHeldBack)
		require.Equal(t, []string{batch[0].ID}, messageIDs(b.entries(t, b.prefix+"orders")))
	})

	t.Run("MaxLenTrimsStreamsToAboutThatLength", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const maxLen, events = 100, 1000
		p := b.publisher(t, &heraldredis.Config{MaxLen: maxLen})
		untrimmed := b.publisher(t, &heraldredis.Config{StreamPrefix: "untrimmed:"})
		batch := make([]herald.Envelope, events)
		for i := range batch {
			batch[i] = envelope("orders", "k") // one key: the stream keeps batch order
		}
		require.NoError(t, p.Publish(t.Context(), batch))
		require.NoError(t, untrimmed.Publish(t.Context(), batch))

		n, err := b.rdb.XLen(t.Context(), b.prefix+"orders").Result()
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, int64(maxLen), "approximate trimming keeps at least MaxLen entries")
		require.Less(t, n, int64(events)/2, "the stream was trimmed")
		n, err = b.rdb.XLen(t.Context(), b.prefix+"untrimmed:orders").Result()
		require.NoError(t, err)
		require.EqualValues(t, events, n, "no MaxLen, no trimming")

		last, err := b.rdb.XRevRangeN(t.Context(), b.prefix+"orders", "+", "-", 1).Result()
		require.NoError(t, err)
		require.Equal(t, batch[len(batch)-1].ID, last[0].Values["id"], "trimming removes the oldest entries")
	})

	t.Run("BatchIsOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		hook := &countingHook{}
		b.rdb.AddHook(hook)
		p := b.publisher(t, nil)
		batchOf := func(n int) []herald.Envelope {
			batch := make([]herald.Envelope, n)
			for i := range batch {
				key := fmt.Sprintf("k%d", i%50)
				if i%10 == 0 {
					key = "" // unordered events travel alone
				}
				batch[i] = envelope(fmt.Sprintf("topic%d", i%3), key)
			}
			return batch
		}
		// The first batch may also load the script into Redis's cache.
		require.NoError(t, p.Publish(t.Context(), batchOf(10)))

		for _, n := range []int{1, 500} {
			hook.reset()
			require.NoError(t, p.Publish(t.Context(), batchOf(n)))
			require.EqualValues(t, 1, hook.pipelines.Load(), "batch of %d: one pipeline", n)
			require.Zero(t, hook.commands.Load(), "batch of %d: no command outside the pipeline", n)
			require.LessOrEqual(t, hook.pipelined.Load(), int64(n), "batch of %d: at most one command per event", n)
		}
		total := int64(0)
		for i := range 3 {
			n, err := b.rdb.XLen(t.Context(), fmt.Sprintf("%stopic%d", b.prefix, i)).Result()
			require.NoError(t, err)
			total += n
		}
		require.EqualValues(t, 511, total)
	})

	t.Run("EmptyBatchSendsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		hook := &countingHook{}
		b.rdb.AddHook(hook)
		p := b.publisher(t, nil)
		require.NoError(t, p.Publish(t.Context(), nil))
		require.Zero(t, hook.pipelines.Load()+hook.commands.Load())
	})
}

// countingHook counts what a client sends, leaving out the commands that
// set up a new connection.
type countingHook struct {
	pipelines atomic.Int64 // pipelines sent
	pipelined atomic.Int64 // commands in them
	commands  atomic.Int64 // commands sent alone
}

func (h *countingHook) reset() {
	h.pipelines.Store(0)
	h.pipelined.Store(0)
	h.commands.Store(0)
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.commands.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if connectionSetup(cmds) {
			return next(ctx, cmds)
		}
		h.pipelines.Add(1)
		h.pipelined.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// connectionSetup reports whether cmds is the pipeline a client sends on a
// new connection (HELLO, CLIENT SETINFO).
func connectionSetup(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}

// Not parallel: SCRIPT FLUSH empties the cache that the package's other
// tests rely on, and sequential tests finish before parallel ones start.
func TestPublishReloadsTheScriptAfterAFlush(t *testing.T) {
	b := setup(t)
	hook := &countingHook{}
	b.rdb.AddHook(hook)
	p := b.publisher(t, nil)
	require.NoError(t, b.rdb.ScriptFlush(t.Context()).Err())

	batch := []herald.Envelope{envelope("orders", "k"), envelope("orders", "k"), envelope("orders", "")}
	hook.reset()
	require.NoError(t, p.Publish(t.Context(), batch))
	require.EqualValues(t, 2, hook.pipelines.Load(), "EVALSHA, then EVAL for the groups that got NOSCRIPT")
	require.Equal(t, messageIDs([]herald.Message{batch[0].Message, batch[1].Message, batch[2].Message}),
		messageIDs(b.entries(t, b.prefix+"orders")), "each event once, in order")

	hook.reset()
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders", "k")}))
	require.EqualValues(t, 1, hook.pipelines.Load(), "the script is cached again")
}

// privateRedis is a redis-server of the test's own, which it may stop or
// pause without disturbing anyone.
type privateRedis struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis(t *testing.T) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not installed (apt-get install redis-server)")
	}
	port := testenv.FreePort(t)

	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	require.NoError(t, cmd.Start())
	r := &privateRedis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	t.Cleanup(r.stop)

	probe := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer probe.Close()
	require.Eventually(t, func() bool { return probe.Ping(t.Context()).Err() == nil },
		10*time.Second, 20*time.Millisecond, "redis-server did not start on %s", r.addr)
	return r
}

// stop kills the server and waits until it is gone. Stopping twice does
// nothing.
func (r *privateRedis) stop() {
	if r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

func TestPublishWhenRedisIsDown(t *testing.T) {
	t.Parallel()

	t.Run("StoppedRedisFailsTheWholeBatch", func(t *testing.T) {
		t.Parallel()
		srv := startRedis(t)
		rdb := connect(t, srv.addr)
		p, err := heraldredis.New(rdb, nil)
		require.NoError(t, err)
		batch := []herald.Envelope{envelope("orders", "k"), envelope("orders", "j")}
		require.NoError(t, p.Publish(t.Context(), batch))

		srv.stop()
		for range 2 { // the pooled connection breaks, then dialling fails
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			err = p.Publish(ctx, []herald.Envelope{envelope("orders", "k"), envelope("orders", "j")})
			cancel()
			require.Error(t, err, "an unconfirmed batch is never a success")
			var be *herald.BatchError
			require.False(t, errors.As(err, &be), "a Redis outage fails the batch as a whole: %v", err)
			require.False(t, herald.IsPermanent(err))
		}
	})

	t.Run("ContextEndsTheWaitForAPausedRedis", func(t *testing.T) {
		t.Parallel()
		srv := startRedis(t)
		rdb := connect(t, srv.addr)
		p, err := heraldredis.New(rdb, nil)
		require.NoError(t, err)
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders", "k")})) // script cached

		// Paused, Redis holds the pipeline's writes unanswered: only the
		// context can end the wait.
		admin := connect(t, srv.addr)
		require.NoError(t, admin.Do(t.Context(), "CLIENT", "PAUSE", "2000", "WRITE").Err())
		t.Cleanup(func() { admin.Do(context.Background(), "CLIENT", "UNPAUSE") })

		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		batch := []herald.Envelope{envelope("orders", "k"), envelope("orders", "j")}
		start := time.Now()
		err = p.Publish(ctx, batch)
		require.Less(t, time.Since(start), time.Second, "Publish returns soon after its deadline")
		for _, e := range batchErrors(t, err, len(batch)) {
			require.ErrorIs(t, e, context.DeadlineExceeded)
		}

		// The abandoned pipeline completes once Redis resumes; the
		// publisher goes on working.
		require.NoError(t, admin.Do(t.Context(), "CLIENT", "UNPAUSE").Err())
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders", "k")}))
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for field, cfg := range map[string]*heraldredis.Config{
		"MaxLen":          {MaxLen: -1},
		"MaxPayloadBytes": {MaxPayloadBytes: -1},
	} {
		_, err := heraldredis.New(rdb, cfg)
		require.ErrorContains(t, err, "Config."+field)
	}
	_, err := heraldredis.New(nil, nil)
	require.Error(t, err)
	_, err = heraldredis.New(rdb, nil)
	require.NoError(t, err, "nil means defaults")
}

// The names of the fields are part of the contract with consumers in other
// languages: they must not change by accident.
func TestFieldNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "id topic key type aggregate_type aggregate_id headers payload", strings.Join([]string{
		heraldredis.FieldID, heraldredis.FieldTopic, heraldredis.FieldKey, heraldredis.FieldType,
		heraldredis.FieldAggregateType, heraldredis.FieldAggregateID, heraldredis.FieldHeaders, heraldredis.FieldPayload,
	}, " "))
}
