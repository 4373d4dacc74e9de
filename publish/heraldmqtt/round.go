package heraldmqtt

import (
	"context"
	"errors"
	"fmt"

	"github.com/eclipse/paho.golang/paho"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// errConnectionLost is why a round stops when the connection it was sent
// on is lost before every PUBACK came.
var errConnectionLost = errors.New("connection to the broker lost")

// sending is one Publish call's state across its rounds.
type sending struct {
	p     *Publisher
	l     *link
	batch []herald.Envelope
	// answered counts the events the broker answered for with a PUBACK,
	// and those refused before sending: with none, the batch failed as a
	// whole.
	answered int
	rounds   int
	// stopped is why no further round can be sent on l.
	stopped error
}

// round is the herald.RoundFunc of a Publish: it builds the round's
// PUBLISH packets, sends them and waits for their PUBACKs.
func (s *sending) round(ctx context.Context, idx []int, errs []error) error {
	send := make([]int, 0, len(idx))
	pubs := make([]*paho.Publish, 0, len(idx))
	for _, i := range idx {
		pub, err := s.p.message(&s.batch[i], s.l.maxPacket)
		if err != nil {
			errs[i] = err
			s.answered++
			continue
		}
		send, pubs = append(send, i), append(pubs, pub)
	}
	if len(send) == 0 {
		return nil
	}
	s.rounds++
	n, stopped := s.p.round(ctx, s.l, s.batch, send, pubs, errs)
	s.answered += n
	if stopped == nil {
		return nil
	}
	s.stopped = stopped
	if ctx.Err() != nil {
		// The caller gave up: not the broker's fault.
		return fmt.Errorf("heraldmqtt: not acknowledged: %w", stopped)
	}
	// The events without an answer are retried without spending an
	// attempt: the connection, not the event, failed.
	return herald.Unavailable(fmt.Errorf("heraldmqtt: not acknowledged: %w", stopped))
}

// message builds the PUBLISH packet of env, or the permanent error that
// keeps it from being sent. brokerMax is the broker's Maximum Packet Size,
// 0 for none.
func (p *Publisher) message(env *herald.Envelope, brokerMax int) (*paho.Publish, error) {
	fail := func(format string, args ...any) (*paho.Publish, error) {
		return nil, herald.Permanent(fmt.Errorf("heraldmqtt: event %s: "+format, append([]any{env.ID}, args...)...))
	}
	topic, err := p.topics.name(env.Topic)
	if err != nil {
		return fail("%v", err)
	}
	for name := range env.Headers {
		if herald.ValidateHeaderName(name) != nil {
			p.log.Warn("dropped a reserved header", "event_id", env.ID, "header", name)
		}
	}
	props := &paho.PublishProperties{User: make(paho.UserProperties, 0, len(env.Headers)+12)}
	var bad string
	set := func(name, value string) {
		if reason := checkString(value); reason != "" && bad == "" {
			bad = fmt.Sprintf("the value of %s %s", name, reason)
		}
		props.User.Add(name, value)
	}
	payload := env.Payload
	switch {
	case p.ce == nil:
		herald.EventHeaders(env, set)
	case p.ce.ModeOr(heraldce.Binary) == heraldce.Structured:
		heraldce.ProducerHeaders(env, set)
		props.ContentType, payload = heraldce.StructuredContentType, p.ce.Structured(env)
	default:
		// Every user property of a binary-mode message is an attribute
		// (the binding names them unprefixed): the producer's other
		// headers cannot travel beside them.
		props.ContentType = p.ce.Binary(env, "", set)
		if reason := checkString(props.ContentType); reason != "" && bad == "" {
			bad = "the content type " + reason
		}
	}
	if bad != "" {
		return fail("%s", bad)
	}
	pub := &paho.Publish{QoS: 1, Topic: topic, Payload: payload, Properties: props}
	limit, which := p.maxPacket, "Config.MaxPacketBytes"
	if brokerMax > 0 && brokerMax < limit {
		limit, which = brokerMax, "the broker's Maximum Packet Size"
	}
	if size := packetSize(pub); size > limit {
		return fail("PUBLISH packet of %d bytes (payload %d) is over the limit of %d (%s)", size, len(env.Payload), limit, which)
	}
	return pub, nil
}

// packetSize is the size of pub's PUBLISH packet on the wire.
func packetSize(pub *paho.Publish) int {
	n := 0
	for _, b := range pub.Packet().Buffers() {
		n += len(b)
	}
	// The fixed header: the packet type and flags, then the remaining
	// length as a variable byte integer of 7 bits a byte.
	header := 2
	for rest := n >> 7; rest > 0; rest >>= 7 {
		header++
	}
	return header + n
}

// acked is the answer to one PUBLISH of a round: j is its position in the
// round.
type acked struct {
	j    int
	resp *paho.PublishResponse
	err  error
}

// round publishes the events of batch at idx (pubs[j] is the packet of
// idx[j]) on l, up to l.receiveMax in flight at once, and waits for their
// PUBACKs, storing each event's result in errs. It returns how many events
// the broker answered for and, when l can take no further round, why.
func (p *Publisher) round(ctx context.Context, l *link, batch []herald.Envelope, idx []int,
	pubs []*paho.Publish, errs []error) (answered int, stopped error) {
	// The publishes end when the round does: a PUBLISH not yet handed to
	// the client is not sent after Publish gave up on it.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()

	// paho's Publish waits for its PUBACK: one goroutine per PUBLISH in
	// flight. They report into a buffer as deep as the round, so that none
	// waits on a round that stopped listening.
	next := make(chan int, len(idx))
	for j := range idx {
		next <- j
	}
	close(next)
	results := make(chan acked, len(idx))
	workers := min(len(idx), l.receiveMax)
	p.wg.Add(workers)
	for range workers {
		go func() {
			defer p.wg.Done()
			for j := range next {
				select {
				case <-rctx.Done():
					return
				case <-l.down:
					// The manager may be on a newer connection already:
					// not one this round may use.
					return
				default:
				}
				resp, err := p.cm.Publish(rctx, pubs[j])
				results <- acked{j, resp, err}
			}
		}()
	}

	take := func(a acked) {
		i := idx[a.j]
		if err, ok := p.outcome(&batch[i], pubs[a.j].Topic, a.resp); ok {
			errs[i] = err
			answered++
			return
		}
		if stopped == nil && a.err != nil {
			stopped = fmt.Errorf("publishing: %s", herald.Scrub(a.err.Error()))
		} else if stopped == nil {
			stopped = errors.New("publishing: no PUBACK")
		}
	}
	for pending := len(idx); pending > 0; pending-- {
		select {
		case a := <-results:
			take(a)
		case <-l.down:
			// The PUBACKs that came count; the rest never will.
		drain:
			for {
				select {
				case a := <-results:
					take(a)
				default:
					break drain
				}
			}
			return answered, errConnectionLost
		case <-rctx.Done():
			if err := context.Cause(ctx); err != nil {
				return answered, err
			}
			return answered, ErrClosed
		}
	}
	return answered, stopped
}

// outcome is the result of one PUBLISH given its response, and whether
// the broker answered for it with a PUBACK (as opposed to the connection
// or ctx ending first).
func (p *Publisher) outcome(env *herald.Envelope, topic string, resp *paho.PublishResponse) (error, bool) {
	if resp == nil {
		return nil, false
	}
	switch {
	case resp.ReasonCode >= 0x80:
		e := &ReasonError{EventID: env.ID, Topic: topic, Code: resp.ReasonCode}
		if resp.Properties != nil {
			e.Reason = herald.Scrub(resp.Properties.ReasonString)
		}
		return refused(e), true
	case resp.ReasonCode == ReasonNoMatchingSubscribers && p.requireSub:
		return &ReasonError{EventID: env.ID, Topic: topic, Code: resp.ReasonCode}, true
	}
	return nil, true
}
