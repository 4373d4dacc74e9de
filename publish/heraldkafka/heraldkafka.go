// Package heraldkafka publishes Herald events to Kafka with franz-go.
//
// Each event becomes one record: topic = the event's topic (after an
// optional TopicPrefix), key = the event's key, value = the payload byte for
// byte, headers = the producer's headers and Herald's (herald.EventHeaders:
// Herald-Id, Herald-Topic, Herald-Type, ...). An event with an empty key gets
// a null record key, so the partitioner spreads such events;
// an empty payload is sent as an empty value, never as a null one (a
// tombstone on a compacted topic).
//
// # The client
//
// New takes a *kgo.Client the caller owns, keeping TLS, SASL and every
// other setting in the caller's hands. Publish returns nil only for records
// the brokers acknowledged with acks=all through the idempotent producer,
// which is franz-go's default (kgo.RequiredAcks(kgo.AllISRAcks()) with
// idempotent writes on); New refuses a client built with
// kgo.DisableIdempotentWrite, another acks setting, a transactional id or
// kgo.ManualFlushing. NewClient builds a suitable client from a list of
// brokers. The idempotent producer lets the brokers drop a record the client
// resent after a lost reply; it does not drop an event the relay publishes
// twice (after a crash, or when Publish gave up waiting): consumers
// deduplicate on the Herald-Id header, for example with heraldinbox.
//
// Events of one key must reach the same partition for consumers to see them
// in order. franz-go's default partitioner hashes the record key; a custom
// kgo.RecordPartitioner must do the same.
//
// # Order within a key, and failed events
//
// Herald requires that no event be delivered after an earlier event of its
// ordered key (herald.Envelope.Ordered) in the same batch failed. franz-go
// keeps the records of a partition in order, and when the broker refuses a
// batch of a partition (or the client gives up on one), it fails every
// record then buffered for that partition. But a record handed to the
// client after that moment is produced normally: had Publish sent all of a
// key's events at once, a later event could land on the broker behind a
// failed one. Publish therefore never relies on that race:
//
//   - Failures it can foresee are found before anything is sent: a topic
//     name Kafka refuses, and a record larger than MaxMessageBytes (which
//     defaults to the client's own batch limit for the topic). Such an event
//     fails permanently, and the later events of its key are held back
//     (herald.ErrHeldBack) without being sent.
//   - The rest go in rounds (herald.SendInRounds). A round holds, in batch
//     order, the next unsent event of each ordered key (and, in the first
//     round, every event that is not ordered); all of a round's records are
//     produced at once, and the next round starts when the brokers have
//     answered them all. An event is therefore sent only after the earlier
//     events of its key were acknowledged, and an event whose key failed
//     in a round is held back.
//
// A batch of distinct keys is one round, one broker round trip; a batch with
// n events of one key takes n round trips. A key's events are never in
// flight together: a broker refusing an earlier one's batch after the client
// buffered a later one would deliver the later one first.
//
// Each round waits up to the client's kgo.ProducerLinger before its records
// leave (franz-go's default is 10ms); NewClient sets it to zero.
//
// # Errors
//
// Results are per event, in a *herald.BatchError. Errors that retrying cannot
// fix are herald.Permanent: a record too large (kerr.MessageTooLarge, from
// the client or a broker), a topic Kafka refuses (kerr.InvalidTopicException),
// a record a broker refuses (kerr.InvalidRecord), and a topic that does not
// exist after the client looked it up kgo.UnknownTopicRetries times (with
// topic auto-creation off). Keep the client's kgo.ProducerBatchMaxBytes (or
// MaxMessageBytes) within the topics' max.message.bytes: a broker that refuses
// a batch as too large fails every record in it, including small ones.
//
// When no broker confirmed or refused any event of the batch before the
// deadline (the brokers are unreachable), Publish returns a plain error, and
// the relay retries the batch without spending the events' attempts.
// Records already sent when Publish stops waiting cannot be withdrawn (the
// idempotent producer keeps them until a broker answers), so they may still
// be delivered; the relay then publishes them again.
//
// # Exactly once
//
// With Config.Transactional, Publish produces each batch in a Kafka
// transaction, on clients of its own whose transactional ids are
// Transactional.ID-0, -1, ... (one transaction at a time each; a relay
// restarted with the same ID fences its predecessor's). Beside the events,
// the transaction writes one record to the marker topic (DefaultMarkerTopic
// unless set): the ids of its events. A record failing aborts the
// transaction. A commit that fails, or whose answer is lost, may have
// landed: Publish aborts the transaction, which settles it, and looks its
// marker up to report the events published or failed.
//
// An event whose row was claimed before (herald.Envelope.Attempt above 1)
// may be in Kafka already: Publish first reads the marker topic as
// read_committed, from the earliest such event's CreatedAt less
// Transactional.Lookback to its end (waiting behind a transaction still
// open there), and reports the events a committed marker names as
// published without sending them. A consumer reading read_committed thus
// sees each event once, though a relay died between Kafka's commit and the
// database's acknowledgement, or another relay rescued its batch. A
// transaction's records are produced at once rather than in rounds: the
// client keeps a partition's records in order, and a failure aborts them
// all, so per-key order holds.
//
// Not covered: read_uncommitted consumers; a relay paused longer than its
// lease before its transaction began, whose batch another relay published
// meanwhile; an event rescued after its marker left the marker topic's
// retention. See docs/destinations/kafka.md, "Exactly once".
//
// # URL form
//
// Importing this package registers kafka:// with package heraldspec
// (ParseURLs, URLConfig):
//
//	kafka://[USER[:PASSWORD]@]HOST:PORT[,kafka://HOST:PORT...][?OPTIONS]
//
// Each URL is a seed broker of one cluster; the user information and the
// options are written on one URL or alike on each. The URL has no path:
// each event's topic names its Kafka topic. Options:
//
//   - sasl=plain, scram-sha-256 or scram-sha-512 authenticates as USER,
//     with the password of the URL or of the destination's Password
//     secret (not both). User information without sasl= is refused rather
//     than taken for PLAIN; PLAIN without TLS is logged at Warn.
//   - tls=true dials TLS, trusting the system's roots; tls=false is the
//     default.
//   - ca_file (a PEM CA to trust instead), cert_file and key_file (a
//     client certificate, mutual TLS) imply tls=true.
//   - transactional=true sets Config.Transactional (exactly once, above);
//     transactional_id=ID sets its ID.
//
// Open refuses a broker that refuses the credentials
// (SASL_AUTHENTICATION_FAILED, or a broker that closes the connection on
// the SASL exchange twice in a row) or the TLS handshake, and reports one
// that does not answer within the connect timeout as unreachable.
package heraldkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// Config configures a Publisher. A nil *Config means the defaults.
type Config struct {
	// TopicPrefix is prepended to every topic as is: with "prod.", the
	// topic "orders" is produced to "prod.orders". Defaults to "" (the
	// event's topic is the Kafka topic).
	TopicPrefix string
	// MaxMessageBytes is the largest record Publish sends, counted as Kafka
	// encodes a batch holding only that record; a larger event fails
	// permanently without being sent. Set it to the topics'
	// max.message.bytes when that is below the client's batch limit.
	// Defaults to the client's kgo.ProducerBatchMaxBytes for the topic
	// (franz-go: 1,000,012 bytes).
	MaxMessageBytes int
	// DeliveryTimeout bounds one Publish call, on top of its context:
	// events without a broker answer by then are reported unconfirmed, and
	// those not yet sent are withdrawn from the client. Defaults to 30s.
	DeliveryTimeout time.Duration
	// Logger receives the publisher's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents sends each event as a CloudEvent (Kafka protocol binding
	// 1.0) in binary mode (ce_* headers, the payload as the value; the
	// default) or structured mode (the JSON event format as the value);
	// see package heraldce for the attributes. The record key stays the
	// event's key; Parse reads either mode back. Defaults to nil: off.
	CloudEvents *heraldce.Config
	// Transactional publishes each batch in a Kafka transaction, exactly
	// once for read_committed consumers (see the package documentation,
	// "Exactly once"). The publisher then holds clients of its own: Close
	// it before the client given to New. Defaults to nil: off.
	Transactional *Transactional
}

// Publisher is a herald.Publisher over a franz-go client. It lives as long
// as the client it was given; it holds nothing to close.
type Publisher struct {
	cl       *kgo.Client
	prefix   string
	maxBytes int
	batchMax func(string) int32 // the client's ProducerBatchMaxBytesFn
	timeout  time.Duration
	ce       *heraldce.Config // nil: CloudEvents off
	tx       *txPool          // nil: not transactional
	// hook, set by tests only, is called at each step of a transaction:
	// "begun", "produced" (before the commit), "committed".
	hook func(step string)
	log  *slog.Logger
}

var _ herald.Publisher = (*Publisher)(nil)

// NewClient returns a franz-go client for brokers (host:port seeds) that
// New accepts: idempotent writes with acks=all (franz-go's defaults, stated
// here so they cannot be lost) and no linger, since Publish waits for its
// records anyway. opts follow and may add TLS, SASL and the like; options
// that New refuses make NewClient fail. The caller closes the client.
func NewClient(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	if len(brokers) == 0 {
		return nil, errors.New("heraldkafka: NewClient: no brokers")
	}
	all := append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("heraldkafka: NewClient: %w", err)
	}
	if err := checkClient(cl); err != nil {
		cl.Close()
		return nil, fmt.Errorf("heraldkafka: NewClient: %w", err)
	}
	return cl, nil
}

// New returns a publisher over client, which the caller owns (and closes).
func New(client *kgo.Client, cfg *Config) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("heraldkafka: New: client is nil")
	}
	if err := checkClient(client); err != nil {
		return nil, fmt.Errorf("heraldkafka: New: %w", err)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.MaxMessageBytes < 0:
		return nil, errors.New("heraldkafka: Config.MaxMessageBytes must not be negative")
	case c.DeliveryTimeout < 0:
		return nil, errors.New("heraldkafka: Config.DeliveryTimeout must not be negative")
	}
	for _, ch := range c.TopicPrefix {
		if !isTopicChar(ch) {
			return nil, fmt.Errorf("heraldkafka: Config.TopicPrefix %q has a character other than ASCII letters, digits, '.', '_' and '-'", c.TopicPrefix)
		}
	}
	if len(c.TopicPrefix) >= maxTopicLen {
		return nil, fmt.Errorf("heraldkafka: Config.TopicPrefix is longer than %d bytes", maxTopicLen-1)
	}
	if c.CloudEvents != nil {
		if err := c.CloudEvents.Validate("heraldkafka: Config.CloudEvents"); err != nil {
			return nil, err
		}
		ce := *c.CloudEvents
		c.CloudEvents = &ce
	}
	var tx *txPool
	if c.Transactional != nil {
		t, err := c.Transactional.withDefaults()
		if err != nil {
			return nil, err
		}
		tx = newTxPool(client, t)
	}
	batchMax, _ := client.OptValue(kgo.ProducerBatchMaxBytesFn).(func(string) int32)
	return &Publisher{
		tx:       tx,
		cl:       client,
		prefix:   c.TopicPrefix,
		maxBytes: c.MaxMessageBytes,
		batchMax: batchMax,
		timeout:  c.DeliveryTimeout,
		ce:       c.CloudEvents,
		log:      c.Logger.With("component", "herald.kafka"),
	}, nil
}

// checkClient returns why cl cannot confirm delivery the way Herald needs.
func checkClient(cl *kgo.Client) error {
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); !ok || acks != kgo.AllISRAcks() {
		return errors.New("the client does not require acks from all in-sync replicas (kgo.RequiredAcks(kgo.AllISRAcks()))")
	}
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		return errors.New("the client has idempotent writes disabled (kgo.DisableIdempotentWrite); Herald needs the idempotent producer")
	}
	if v := cl.OptValues(kgo.TransactionalID); len(v) == 2 && v[1] == true {
		return errors.New("the client is transactional (kgo.TransactionalID); Herald produces outside transactions")
	}
	if manual, _ := cl.OptValue(kgo.ManualFlushing).(bool); manual {
		return errors.New("the client flushes manually (kgo.ManualFlushing); records would never leave")
	}
	return nil
}

// Publish produces the batch in rounds (see the package documentation) and
// waits for the brokers' acknowledgements. It returns nil only when every
// record was acknowledged, a *herald.BatchError when some events failed, and
// a plain error when the client is closed or no broker answered at all.
func (p *Publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	if p.tx != nil {
		defer cancel()
		return p.publishTx(ctx, batch)
	}
	// Withdraws our records still waiting in the client's buffer when we
	// stop waiting for them.
	defer cancel()

	var (
		closed   error // the client was closed: no event can be answered
		answered bool  // a broker confirmed or refused an event, or we refused one
		rounds   int
	)
	errs := herald.SendInRounds(ctx, batch, 1, func(ctx context.Context, round []int, errs []error) error {
		rounds++
		var got bool
		got, closed = p.sendRound(ctx, batch, round, errs)
		answered = answered || got
		return closed
	})
	if closed != nil {
		return closed
	}
	err := herald.BatchResult(errs)
	if err == nil {
		p.log.Debug("published batch", "batch_size", len(batch), "rounds", rounds)
		return nil
	}
	if !answered {
		// Nothing came back from any broker: the cluster is unreachable,
		// an outage rather than a failure of these events.
		return fmt.Errorf("heraldkafka: no broker answered for any of %d events: %w", len(batch), firstError(errs))
	}
	return err
}

// sendRound builds the records of batch[i] for i in round and produces them
// at once, setting errs[i] for each. It reports whether any event was
// answered (refused here, or by a broker), and returns an error only when
// the client is closed.
func (p *Publisher) sendRound(ctx context.Context, batch []herald.Envelope, round []int, errs []error) (answered bool, closed error) {
	idx := make([]int, 0, len(round))
	recs := make([]*kgo.Record, 0, len(round))
	// A round holds at most one event of each ordered key (SendInRounds
	// with one per key), so a refusal here holds back nothing in it.
	for _, i := range round {
		env := &batch[i]
		if ctx.Err() != nil {
			errs[i] = unconfirmed(ctx)
			continue
		}
		rec, err := p.record(env)
		if err != nil {
			errs[i], answered = err, true
			continue
		}
		idx, recs = append(idx, i), append(recs, rec)
	}
	if len(recs) == 0 {
		return answered, nil
	}
	got, err := p.produce(ctx, idx, recs, errs)
	return answered || got, err
}

// firstError returns the first non-nil error of errs.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// produce hands recs (the records of batch[idx[j]]) to the client at once and
// waits for all their results, or for ctx to end. It stores each result in
// errs and reports whether any broker answered. It returns an error only
// when the client is closed.
func (p *Publisher) produce(ctx context.Context, idx []int, recs []*kgo.Record, errs []error) (answered bool, err error) {
	type result struct {
		j   int
		err error
	}
	// Buffered for every record: a promise that runs after Publish stopped
	// waiting never blocks the client's promise goroutine.
	results := make(chan result, len(recs))
	for j, rec := range recs {
		p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { results <- result{j, err} })
	}
	done := make([]bool, len(recs))
	record := func(r result) error {
		done[r.j] = true
		i := idx[r.j]
		switch {
		case r.err == nil:
			answered = true
			errs[i] = nil
		case errors.Is(r.err, kgo.ErrClientClosed):
			return fmt.Errorf("heraldkafka: client closed: %w", r.err)
		default:
			var kafkaErr *kerr.Error
			if errors.As(r.err, &kafkaErr) {
				answered = true
			}
			errs[i] = classify(recs[r.j].Topic, r.err)
		}
		return nil
	}
	for waiting := len(recs); waiting > 0; waiting-- {
		select {
		case r := <-results:
			if err := record(r); err != nil {
				return answered, err
			}
		case <-ctx.Done():
			// Keep the results that already arrived: each spares the relay
			// a republish.
			for {
				select {
				case r := <-results:
					if err := record(r); err != nil {
						return answered, err
					}
					continue
				default:
				}
				break
			}
			for j, ok := range done {
				if !ok {
					errs[idx[j]] = unconfirmed(ctx)
				}
			}
			return answered, nil
		}
	}
	return answered, nil
}

// record builds the Kafka record of env, or the permanent error that keeps
// it from being sent.
func (p *Publisher) record(env *herald.Envelope) (*kgo.Record, error) {
	topic := p.prefix + env.Topic
	if reason := checkTopic(topic); reason != "" {
		return nil, herald.Permanent(fmt.Errorf("heraldkafka: topic %q %s: %w", topic, reason, kerr.InvalidTopicException))
	}
	rec := &kgo.Record{Topic: topic, Value: env.Payload, Headers: headers(env)}
	if p.ce != nil {
		rec.Value, rec.Headers = p.cloudEvent(env)
	}
	if rec.Value == nil {
		rec.Value = []byte{}
	}
	if env.Key != "" {
		rec.Key = []byte(env.Key)
	}
	limit := p.maxBytes
	if p.batchMax != nil {
		if b := int(p.batchMax(topic)); limit == 0 || b < limit {
			limit = b
		}
	}
	if size := recordSize(rec); limit > 0 && size > limit {
		return nil, herald.Permanent(fmt.Errorf("heraldkafka: event %s is %d bytes as a record, over the limit of %d for topic %q: %w",
			env.ID, size, limit, topic, kerr.MessageTooLarge))
	}
	return rec, nil
}

func headers(env *herald.Envelope) []kgo.RecordHeader {
	var producer, own []kgo.RecordHeader
	herald.EventHeaders(env, func(name, v string) {
		h := kgo.RecordHeader{Key: name, Value: []byte(v)}
		// EventHeaders drops producer names starting with Herald-: only
		// Herald's own headers have them.
		if strings.HasPrefix(name, "Herald-") {
			own = append(own, h)
		} else {
			producer = append(producer, h)
		}
	})
	// Sorted, the same event always makes the same record, whatever the
	// map's order.
	slices.SortFunc(producer, func(a, b kgo.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
	return append(producer, own...)
}

// cloudEvent returns the value and headers of env as a CloudEvent: the
// producer's headers, sorted, then the binding's.
func (p *Publisher) cloudEvent(env *herald.Envelope) ([]byte, []kgo.RecordHeader) {
	var hs []kgo.RecordHeader
	add := func(name, v string) { hs = append(hs, kgo.RecordHeader{Key: name, Value: []byte(v)}) }
	heraldce.ProducerHeaders(env, add)
	slices.SortFunc(hs, func(a, b kgo.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
	if p.ce.ModeOr(heraldce.Binary) == heraldce.Structured {
		add("content-type", heraldce.StructuredContentType)
		return p.ce.Structured(env), hs
	}
	p.ce.KafkaBinary(env, add)
	return env.Payload, hs
}

// recordSize bounds from above the bytes of a record batch holding only rec,
// as the client counts them against its batch limit: the batch header and
// the record with every variable-length field at its widest where the
// client's encoding depends on timing (the timestamp delta).
func recordSize(rec *kgo.Record) int {
	const (
		batchOverhead = 65 // batch header with array lengths
		recordFixed   = 5 + 1 + 10 + 5
	)
	n := recordFixed + varintLen(len(rec.Key)) + len(rec.Key) + varintLen(len(rec.Value)) + len(rec.Value) + varintLen(len(rec.Headers))
	for _, h := range rec.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return batchOverhead + n
}

// varintLen is the length of n as a zigzag varint.
func varintLen(n int) int {
	u := uint64(n) << 1
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}

// classify wraps a produce error for one record.
func classify(topic string, err error) error {
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.InvalidRecord):
		return herald.Permanent(fmt.Errorf("heraldkafka: producing to %q: %w", topic, err))
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// The client fails a record with these only after the topic stayed
		// unknown across several metadata lookups (kgo.UnknownTopicRetries):
		// it does not exist and the cluster will not create it.
		return herald.Permanent(fmt.Errorf("heraldkafka: topic %q does not exist: %w", topic, err))
	}
	return fmt.Errorf("heraldkafka: producing to %q: %w", topic, err)
}

func unconfirmed(ctx context.Context) error {
	return fmt.Errorf("heraldkafka: no acknowledgement received: %w", context.Cause(ctx))
}

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// checkTopic returns why Kafka would refuse s as a topic name, or "".
func checkTopic(s string) string {
	switch {
	case s == "":
		return "is empty"
	case s == "." || s == "..":
		return "is '.' or '..'"
	case len(s) > maxTopicLen:
		return fmt.Sprintf("is longer than %d bytes", maxTopicLen)
	}
	for _, c := range s {
		if !isTopicChar(c) {
			return "has a character other than ASCII letters, digits, '.', '_' and '-'"
		}
	}
	return ""
}

func isTopicChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// MaxMessageBytes is the largest record the publisher sends: its
// Config.MaxMessageBytes, or the client's batch limit when lower (for a
// topic without a limit of its own). A claim check configured by URL
// offloads the events above it (heraldclaim.Limited).
func (p *Publisher) MaxMessageBytes() int {
	limit := p.maxBytes
	if p.batchMax != nil {
		if b := int(p.batchMax("")); limit == 0 || (b > 0 && b < limit) {
			limit = b
		}
	}
	return limit
}
