// Package heraldredis publishes Herald events to Redis Streams.
//
// Each event becomes one stream entry, added with XADD to the stream named
// by its topic (after an optional prefix). The entry's fields carry the
// event (see the Field constants): its id, topic, key, type, aggregate,
// event and aggregate versions, producer headers as one JSON object, and
// the payload byte for byte. The
// producer headers are those herald.EventHeaders lets through (a reserved
// name in a row written with plain SQL is dropped); Herald's own are the
// entry's other fields. A consumer turns an entry back into the event with
// Parse.
//
// With Config.CloudEvents set, every entry is a CloudEvent instead. Redis
// Streams have no CloudEvents binding; Herald follows the Kafka binding's
// rules, since an entry's fields are, like a record's headers, a flat list
// of names and values: in binary mode (the default) each attribute is a
// field named "ce_" and the attribute (FieldCEPrefix: "ce_id" is the event
// id), datacontenttype is the content-type field (FieldContentType), and
// the payload field is the event's payload; in structured mode the
// content-type field is heraldce.StructuredContentType and the payload
// field holds the event in the JSON event format. Either way the
// producer's headers other than Content-Type stay in the headers field,
// where no header can pass for an attribute, and Herald's own fields (id,
// topic, ...) are not sent, as the attributes carry them (see package
// heraldce). Parse reads both modes back.
//
// Redis has no broker-side deduplication: an event the relay republishes
// (after a lost reply or a crash) is added again, so consumers deduplicate
// on the event id, as Herald's inbox does.
//
// # Order per key
//
// A batch goes to Redis in one pipeline: one round trip, however large the
// batch. The ordered events of one key (herald.Envelope.Ordered) are sent
// together as one call of a small Lua script that adds them in order and
// stops at the first XADD that fails, so an event is never added after an
// earlier event of its key failed: Redis reports errors per command and
// would otherwise go on with the next XADD of the pipeline. The events the
// script did not reach are reported with herald.ErrHeldBack. A script runs
// atomically, so one key's events also sit next to each other in their
// stream. The script groups a key's events across topics, so a failure on
// one topic also holds back the key's later events on the others. Events
// that are not ordered each go in a call of their own and are never held
// back.
//
// On Redis Cluster, a script may only touch streams of one hash slot: when
// the events of one key go to several topics, give those streams a common
// hash tag (for example a StreamPrefix of "{events}:"), or their key's
// events fail with CROSSSLOT.
package heraldredis

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// Names of the fields of a stream entry.
const (
	FieldID            = "id"
	FieldTopic         = "topic"
	FieldKey           = "key"
	FieldType          = "type"
	FieldAggregateType = "aggregate_type"
	FieldAggregateID   = "aggregate_id"
	// FieldEventVersion holds the event's version (EventVersion, as a
	// decimal number; always present), FieldAggregateVersion the
	// aggregate's (AggregateVersion; present when set): the values of
	// herald.HeaderEventVersion and herald.HeaderAggregateVersion.
	FieldEventVersion     = "event_version"
	FieldAggregateVersion = "aggregate_version"
	// FieldHeaders holds the producer's headers as one JSON object of
	// strings, so no header can stand in for another field.
	FieldHeaders = "headers"
	// FieldPayload holds the payload, byte for byte; with CloudEvents in
	// structured mode, the event in the JSON event format.
	FieldPayload = "payload"
	// FieldContentType is, with CloudEvents on, the datacontenttype of a
	// binary-mode entry or the event format of a structured one.
	FieldContentType = "content-type"
	// FieldCEPrefix starts the name of each attribute's field of a
	// binary-mode CloudEvent: "ce_id", "ce_source", ...
	FieldCEPrefix = "ce_"
)

// DefaultMaxPayloadBytes is Redis's own default limit on one argument
// (proto-max-bulk-len): 512 MiB.
const DefaultMaxPayloadBytes = 512 << 20

// Config configures a Publisher. A nil *Config means the defaults.
type Config struct {
	// StreamPrefix is prepended, as is, to every topic to name its stream:
	// with "prod:", the topic "orders" goes to the stream "prod:orders".
	// Defaults to "" (the topic is the stream name).
	StreamPrefix string
	// MaxLen, when positive, trims every stream to about this many entries
	// as it grows (XADD MAXLEN ~): Redis removes whole nodes of old entries
	// only, so a stream may hold somewhat more. Trimming drops entries
	// whether or not consumers have read them. Defaults to 0 (no trimming).
	MaxLen int64
	// MaxPayloadBytes is the largest payload Publish sends; a larger one is
	// reported with herald.Permanent without being sent. Redis answers an
	// argument over its proto-max-bulk-len by closing the connection, which
	// would fail the whole batch on every retry; set this to the server's
	// limit if it was lowered. Defaults to DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// Logger receives the publisher's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents adds each event as a CloudEvent, in binary mode (ce_*
	// fields) or structured mode (the JSON event format in the payload
	// field); see the package documentation. MaxPayloadBytes then bounds
	// the payload field. Defaults to nil: off.
	CloudEvents *heraldce.Config
}

// Publisher is a herald.Publisher over a go-redis client. It lives as long
// as the client it was given; it holds nothing to close.
type Publisher struct {
	rdb        redis.UniversalClient
	prefix     string
	maxLen     string // MaxLen as an argument; "0" means no trimming
	maxPayload int
	ce         *heraldce.Config // nil: CloudEvents off
	log        *slog.Logger
}

var _ herald.Publisher = (*Publisher)(nil)

// New returns a publisher over rdb, a client the caller owns (and closes).
//
// The client's options apply: its MaxRetries makes it resend a pipeline
// whose replies were lost, which can add a key's events twice (at least
// once, as with any lost acknowledgement); its ReadTimeout bounds how long
// an unanswered pipeline holds a connection after Publish returned on a
// cancelled context.
func New(rdb redis.UniversalClient, cfg *Config) (*Publisher, error) {
	if rdb == nil {
		return nil, errors.New("heraldredis: New: redis client is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.MaxLen < 0:
		return nil, errors.New("heraldredis: Config.MaxLen must not be negative")
	case c.MaxPayloadBytes < 0:
		return nil, errors.New("heraldredis: Config.MaxPayloadBytes must not be negative")
	}
	if c.CloudEvents != nil {
		if err := c.CloudEvents.Validate("heraldredis: Config.CloudEvents"); err != nil {
			return nil, err
		}
		ce := *c.CloudEvents
		c.CloudEvents = &ce
	}
	return &Publisher{
		rdb:        rdb,
		prefix:     c.StreamPrefix,
		maxLen:     strconv.FormatInt(c.MaxLen, 10),
		maxPayload: c.MaxPayloadBytes,
		ce:         c.CloudEvents,
		log:        c.Logger.With("component", "herald.redis"),
	}, nil
}

// addInOrder adds a key's events to their streams in order and stops at the
// first XADD that fails.
//
// KEYS are the events' streams. ARGV[1] is the MAXLEN ("0" for none); then,
// per event, the number of its field and value arguments followed by them.
// The reply holds one entry per event reached: the new entry's id, or, for
// the last one, the error that stopped the script.
//
//go:embed add_in_order.lua
var addInOrderSource string

var addInOrder = redis.NewScript(addInOrderSource)

// group is the events of one key that go to Redis, in batch order.
type group struct {
	idx  []int    // positions in the batch
	keys []string // their streams
	argv []any
	cmd  *redis.Cmd
}

// Publish adds the batch to Redis in one pipeline and waits for the
// replies. It returns nil only when Redis answered every XADD with an entry
// id. It returns a *herald.BatchError when some events failed or Redis
// confirmed only some, and a plain error when Redis confirmed none because
// it is unreachable or not accepting writes, so that the relay retries the
// batch as an outage, without spending attempts.
func (p *Publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("heraldredis: not published: %w", err)
	}
	// A key's script stops at its first failure, so several events of a
	// key may share a round (see herald.SendInRounds): with perKey as
	// large as the batch, the whole batch is one round and one pipeline.
	var down error // Redis as a whole did not take the round
	errs := herald.SendInRounds(ctx, batch, len(batch), func(ctx context.Context, round []int, errs []error) error {
		down = p.sendRound(ctx, batch, round, errs)
		return down
	})
	if down != nil {
		return down
	}
	if err := herald.BatchResult(errs); err != nil {
		return err
	}
	p.log.Debug("published batch", "batch_size", len(batch))
	return nil
}

// sendRound adds the events batch[i] for i in round in one pipeline, one
// script per ordered key, and sets errs[i] for each from the replies. It
// returns an error only when Redis confirmed none of them because it is
// unreachable or not accepting writes.
func (p *Publisher) sendRound(ctx context.Context, batch []herald.Envelope, round []int, errs []error) error {
	groups, order := p.groups(batch, round, errs)
	if len(order) == 0 {
		return nil
	}
	if abandoned, err := p.exec(ctx, groups, order, false); err != nil {
		return p.failed(batch, errs, groups, order, abandoned, err)
	}
	// A script cache emptied by a restart or SCRIPT FLUSH answers EVALSHA
	// with NOSCRIPT without running anything: send those groups again with
	// the script's source, which also caches it for later batches.
	var again []string
	for _, k := range order {
		if redis.HasErrorPrefix(groups[k].cmd.Err(), "NOSCRIPT") {
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		if abandoned, err := p.exec(ctx, groups, again, true); err != nil {
			return p.failed(batch, errs, groups, order, abandoned, err)
		}
	}

	confirmed, outage := 0, error(nil)
	for _, k := range order {
		g := groups[k]
		n, err := p.results(batch, errs, g)
		confirmed += n
		if err != nil && unavailable(err) && outage == nil {
			outage = err
		}
	}
	if outage != nil && confirmed == 0 {
		return fmt.Errorf("heraldredis: redis not accepting writes: %w", outage)
	}
	return nil
}

// groups splits the round's events into the groups of their scripts, in the
// order each group first appears: the ordered events of one key form one
// group, whatever their topics (stricter than the relay, which orders a key
// within its topic; see the package documentation), and every other event
// is a group of its own. An event that cannot be sent
// gets its error in errs, and the later events of its group are held back,
// as the script would hold them back.
func (p *Publisher) groups(batch []herald.Envelope, round []int, errs []error) (map[string]*group, []string) {
	groups := make(map[string]*group)
	var order []string
	failed := make(map[string]string) // group -> id of the event that failed
	for _, i := range round {
		env := &batch[i]
		gk := "k:" + env.Key
		if !env.Ordered || env.Key == "" {
			gk = "i:" + strconv.Itoa(i)
		}
		if id, ok := failed[gk]; ok {
			errs[i] = heldBack(id)
			continue
		}
		stream, argv, err := p.entry(env)
		if err != nil {
			errs[i] = err
			failed[gk] = env.ID
			continue
		}
		g := groups[gk]
		if g == nil {
			g = &group{argv: []any{p.maxLen}}
			groups[gk] = g
			order = append(order, gk)
		}
		g.idx = append(g.idx, i)
		g.keys = append(g.keys, stream)
		g.argv = append(g.argv, argv...)
	}
	return groups, order
}

// entry returns the stream and the script arguments of one event: its
// field count, then its fields and values.
func (p *Publisher) entry(env *herald.Envelope) (string, []any, error) {
	stream := p.prefix + env.Topic
	switch {
	case stream == "":
		return "", nil, herald.Permanent(errors.New("heraldredis: event has no topic"))
	case len(env.Payload) > p.maxPayload:
		return "", nil, herald.Permanent(fmt.Errorf("heraldredis: payload of %d bytes is over the limit of %d (Config.MaxPayloadBytes)",
			len(env.Payload), p.maxPayload))
	case p.ce != nil:
		args, err := p.cloudEvent(env)
		return stream, args, err
	}
	args := make([]any, 1, 21)
	args = append(args, FieldID, env.ID, FieldTopic, env.Topic)
	for _, f := range [...]struct{ name, v string }{
		{FieldKey, env.Key},
		{FieldType, env.Type},
		{FieldAggregateType, env.AggregateType},
		{FieldAggregateID, env.AggregateID},
	} {
		if f.v != "" {
			args = append(args, f.name, f.v)
		}
	}
	versions, h := eventFields(env)
	args = append(args, versions...)
	if len(h) > 0 {
		encoded, err := json.Marshal(h)
		if err != nil {
			return "", nil, herald.Permanent(fmt.Errorf("heraldredis: encoding headers: %w", err))
		}
		args = append(args, FieldHeaders, encoded)
	}
	// Always present, so that an empty payload reads back as one.
	args = append(args, FieldPayload, env.Payload)
	args[0] = len(args) - 1
	return stream, args, nil
}

// cloudEvent returns the script arguments of env as a CloudEvent: its field
// count, then its fields and values.
func (p *Publisher) cloudEvent(env *herald.Envelope) ([]any, error) {
	args := make([]any, 1, 33)
	var h map[string]string
	heraldce.ProducerHeaders(env, func(name, v string) {
		if h == nil {
			h = make(map[string]string, len(env.Headers))
		}
		h[name] = v
	})
	payload := env.Payload
	if p.ce.ModeOr(heraldce.Binary) == heraldce.Structured {
		args = append(args, FieldContentType, heraldce.StructuredContentType)
		payload = p.ce.Structured(env)
		if len(payload) > p.maxPayload {
			return nil, herald.Permanent(fmt.Errorf("heraldredis: event of %d bytes in the JSON event format is over the limit of %d (Config.MaxPayloadBytes)",
				len(payload), p.maxPayload))
		}
	} else if ct := p.ce.Binary(env, FieldCEPrefix, func(name, v string) { args = append(args, name, v) }); ct != "" {
		args = append(args, FieldContentType, ct)
	}
	if len(h) > 0 {
		encoded, err := json.Marshal(h)
		if err != nil {
			return nil, herald.Permanent(fmt.Errorf("heraldredis: encoding headers: %w", err))
		}
		args = append(args, FieldHeaders, encoded)
	}
	args = append(args, FieldPayload, payload)
	args[0] = len(args) - 1
	return args, nil
}

// eventFields returns the version fields of env's entry, as names and
// values, and the producer headers of env that reach the broker (nil for
// none), both as herald.EventHeaders maps them.
func eventFields(env *herald.Envelope) (versions []any, h map[string]string) {
	herald.EventHeaders(env, func(name, v string) {
		switch name {
		case herald.HeaderEventVersion:
			versions = append(versions, FieldEventVersion, v)
			return
		case herald.HeaderAggregateVersion:
			versions = append(versions, FieldAggregateVersion, v)
			return
		case herald.HeaderID, herald.HeaderTopic, herald.HeaderKey, herald.HeaderType,
			herald.HeaderAggregateType, herald.HeaderAggregateID:
			// The entry holds these as fields of their own, under the
			// names consumers read (FieldID, FieldTopic, ...).
			return
		}
		if h == nil {
			h = make(map[string]string, len(env.Headers))
		}
		h[name] = v
	})
	return versions, h
}

// exec sends the scripts of the named groups in one pipeline. It returns an
// error only when the pipeline as a whole did not complete: the connection
// failed, or ctx ended first, which abandons the named groups' commands to
// the pipeline still running. Per-command errors stay on the commands.
func (p *Publisher) exec(ctx context.Context, groups map[string]*group, names []string, eval bool) (abandoned map[string]bool, err error) {
	pipe := p.rdb.Pipeline()
	for _, k := range names {
		g := groups[k]
		if eval {
			g.cmd = addInOrder.Eval(ctx, pipe, g.keys, g.argv...)
		} else {
			g.cmd = addInOrder.EvalSha(ctx, pipe, g.keys, g.argv...)
		}
	}
	// The client does not stop a pipeline when ctx ends unless it was built
	// with ContextTimeoutEnabled, so wait for the replies here, where ctx
	// can end the wait. The pipeline goes on in its goroutine until Redis
	// answers or the client's ReadTimeout passes.
	done := make(chan error, 1)
	go func() {
		_, err := pipe.Exec(ctx)
		done <- err
	}()
	select {
	case <-done: //nolint:errcheck // Exec's own error is the first command's; each command has its own, read below.
		for _, k := range names {
			if cmdErr := groups[k].cmd.Err(); cmdErr != nil && !isRedisError(cmdErr) {
				// The connection failed: the commands without a reply may
				// or may not have run.
				return nil, fmt.Errorf("heraldredis: sending batch: %w", cmdErr)
			}
		}
		return nil, nil
	case <-ctx.Done():
		abandoned = make(map[string]bool, len(names))
		for _, k := range names {
			abandoned[k] = true
		}
		return abandoned, fmt.Errorf("heraldredis: no reply from redis: %w", ctx.Err())
	}
}

// failed reports a pipeline that did not complete. The replies that arrived
// before it broke still count: each confirmed event spares the relay a
// republish, which Redis would store as a duplicate. It returns cause when
// Redis confirmed nothing, and nil when the events' errors tell the story.
//
// A ctx that ended is reported per event, as the relay expects of a
// cancelled Publish: it wraps ctx's error.
func (p *Publisher) failed(batch []herald.Envelope, errs []error, groups map[string]*group, order []string, abandoned map[string]bool, cause error) error {
	confirmed := 0
	for _, k := range order {
		g := groups[k]
		if abandoned[k] {
			// The pipeline still writes these commands' results: read none.
			for _, i := range g.idx {
				errs[i] = cause
			}
			continue
		}
		if g.cmd.Err() != nil && !isRedisError(g.cmd.Err()) {
			for _, i := range g.idx {
				errs[i] = fmt.Errorf("heraldredis: not confirmed: %w", cause)
			}
			continue
		}
		n, _ := p.results(batch, errs, g)
		confirmed += n
	}
	if confirmed == 0 && abandoned == nil {
		return cause
	}
	return nil
}

// results sets the errors of one group's events from its script's reply and
// returns how many events Redis confirmed, and the error that stopped the
// group, if any.
func (p *Publisher) results(batch []herald.Envelope, errs []error, g *group) (int, error) {
	fail := func(from int, err error) {
		errs[g.idx[from]] = err
		for _, i := range g.idx[from+1:] {
			errs[i] = heldBack(batch[g.idx[from]].ID)
		}
	}
	reply, err := g.cmd.Slice()
	if err != nil {
		// The script did not run (NOSCRIPT twice, OOM, READONLY,
		// CROSSSLOT, ...): nothing of the group was added.
		fail(0, p.commandError(g.keys[0], err))
		return 0, err
	}
	for j := range g.idx {
		if j >= len(reply) {
			fail(j, fmt.Errorf("heraldredis: adding to stream %q: script stopped without a reply for this event", g.keys[j]))
			return j, errors.New("short reply")
		}
		switch v := reply[j].(type) {
		case string:
			errs[g.idx[j]] = nil
		case error:
			fail(j, p.commandError(g.keys[j], v))
			return j, v
		default:
			fail(j, fmt.Errorf("heraldredis: adding to stream %q: unexpected reply %T", g.keys[j], v))
			return j, errors.New("unexpected reply")
		}
	}
	return len(g.idx), nil
}

func (p *Publisher) commandError(stream string, err error) error {
	return fmt.Errorf("heraldredis: adding to stream %q: %w", stream, err)
}

func heldBack(failedID string) error {
	return fmt.Errorf("heraldredis: not sent after event %s of its key failed: %w", failedID, herald.ErrHeldBack)
}

// isRedisError reports whether err is a reply from Redis, as opposed to a
// failure to reach it.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// unavailable reports whether err, a reply from Redis, says the server as a
// whole cannot take writes now rather than that this event failed.
func unavailable(err error) bool {
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsOOMError(err) ||
		redis.IsMasterDownError(err) || redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		redis.IsAuthError(err) || redis.HasErrorPrefix(err, "BUSY") || redis.HasErrorPrefix(err, "NOSCRIPT")
}
