package heraldaws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// DefaultMaxConcurrentRequests is the default MaxConcurrentRequests.
const DefaultMaxConcurrentRequests = 8

// publisher is what the SQS and SNS publishers share: everything but the
// request itself.
type publisher struct {
	what        string // "queue" or "topic", for errors
	dest        func(env *herald.Envelope) string
	maxBytes    int
	concurrency int
	send        sendFunc
	ce          *heraldce.Config // nil: CloudEvents off
	log         *slog.Logger
}

// Fixed returns a destination function (SQSConfig.QueueURL,
// SNSConfig.TopicARN) that sends every event to dest.
func Fixed(dest string) func(env *herald.Envelope) string {
	return func(*herald.Envelope) string { return dest }
}

// settings are what NewSNS and NewSQS give newPublisher: the fields their
// Configs share, and what tells the two services apart.
type settings struct {
	service   string // "SNS" or "SQS"
	what      string // "topic" or "queue", for errors
	destField string // the Config field of dest: "TopicARN" or "QueueURL"
	destHint  string // how to fill it for one destination
	send      sendFunc

	dest        func(*herald.Envelope) string
	maxBytes    int
	concurrency int
	log         *slog.Logger
	ce          *heraldce.Config
}

// newPublisher checks and fills the settings the SQS and SNS publishers
// share; errors name the service's Config field at fault.
func newPublisher(s settings) (publisher, error) {
	config := s.service + "Config"
	if s.dest == nil {
		return publisher{}, errors.New("heraldaws: " + config + "." + s.destField + " is required (" + s.destHint + ")")
	}
	if s.maxBytes == 0 {
		s.maxBytes = DefaultMaxMessageBytes
	}
	if s.concurrency == 0 {
		s.concurrency = DefaultMaxConcurrentRequests
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	switch {
	case s.maxBytes < 0:
		return publisher{}, errors.New("heraldaws: " + config + ".MaxMessageBytes must not be negative")
	case s.concurrency < 0:
		return publisher{}, errors.New("heraldaws: " + config + ".MaxConcurrentRequests must not be negative")
	}
	ce := s.ce
	if ce != nil {
		if err := ce.Validate("heraldaws: " + config + ".CloudEvents"); err != nil {
			return publisher{}, err
		}
		if ce.ModeOr(heraldce.Structured) != heraldce.Structured {
			return publisher{}, fmt.Errorf("heraldaws: %s.CloudEvents.Mode %q: SQS and SNS take CloudEvents in structured mode only "+
				"(no binding defines a binary mode for them, and their 10 message attributes cannot hold every attribute)", config, ce.Mode)
		}
		c := *ce
		ce = &c
	}
	return publisher{
		what: s.what, dest: s.dest, maxBytes: s.maxBytes, concurrency: s.concurrency, send: s.send, ce: ce,
		log: s.log.With("component", "herald."+strings.ToLower(s.service)),
	}, nil
}

// publish sends the batch in rounds of herald.SendInRounds, one event per
// ordered key in each round, since neither SQS nor SNS stops a batch at an
// entry it refused: a later event of the same message group in the same
// request would be stored after an earlier one failed.
func (p *publisher) publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("heraldaws: not published: %w", context.Cause(ctx))
	}
	s := &sending{p: p, batch: batch}
	errs := herald.SendInRounds(ctx, batch, 1, s.round)
	result := herald.BatchResult(errs)
	switch {
	case result == nil:
		p.log.Debug("published batch", "batch_size", len(batch), "rounds", s.rounds, "requests", s.requests)
		return nil
	case s.answered == 0:
		// AWS answered for no event: it is unreachable, throttling or
		// refusing the credentials, and the relay takes a plain error as an
		// outage, spending no attempt.
		return fmt.Errorf("heraldaws: no event of %d confirmed: %w", len(batch), firstError(errs))
	}
	return result
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sending is one Publish call's state across its rounds.
type sending struct {
	p     *publisher
	batch []herald.Envelope
	// answered counts the events AWS answered for (accepted, or refused
	// for themselves) and those refused before sending.
	answered, rounds, requests int
}

// round is the herald.RoundFunc of a Publish: it builds the round's
// messages, sends them in batch requests, several at once, and stops the
// Publish when AWS answered for none of them.
func (s *sending) round(ctx context.Context, idx []int, errs []error) error {
	s.rounds++
	msgs := make([]*message, 0, len(idx))
	for _, i := range idx {
		env := &s.batch[i]
		m, err := buildMessage(env, i, s.p.dest(env), s.p.maxBytes, s.p.ce)
		if err != nil {
			errs[i] = err
			s.answered++
			continue
		}
		msgs = append(msgs, &m)
	}
	chunks := s.p.chunks(msgs)
	s.requests += len(chunks)
	answered := make([]int, len(chunks))
	var wg sync.WaitGroup
	limit := make(chan struct{}, s.p.concurrency)
	for c, chunk := range chunks {
		limit <- struct{}{}
		wg.Go(func() {
			defer func() { <-limit }()
			answered[c] = s.p.sendChunk(ctx, chunk, errs)
		})
	}
	wg.Wait()
	n := 0
	for _, a := range answered {
		n += a
	}
	s.answered += n
	if n == 0 && len(chunks) > 0 {
		// Every request failed without an answer: later rounds would only
		// wait for the same failure, event after event of a key. The
		// events not yet sent get this round's error, not one an event
		// earned for itself (a permanent one would send them to the dead
		// letters).
		return errs[chunks[0][0].i]
	}
	return nil
}

// chunks splits msgs into batch requests: one destination each, at most
// maxBatchEntries entries and maxBytes in all, in batch order.
func (p *publisher) chunks(msgs []*message) [][]*message {
	var out [][]*message
	open := map[string]int{} // destination -> its chunk being filled
	size := map[string]int{}
	for _, m := range msgs {
		c, ok := open[m.dest]
		if !ok || len(out[c]) == maxBatchEntries || size[m.dest]+m.size > p.maxBytes {
			out = append(out, nil)
			c, open[m.dest], size[m.dest] = len(out)-1, len(out)-1, 0
		}
		out[c] = append(out[c], m)
		size[m.dest] += m.size
	}
	return out
}

// sendChunk sends one batch request and sets the errors of its events. It
// returns how many events AWS answered for.
func (p *publisher) sendChunk(ctx context.Context, msgs []*message, errs []error) int {
	dest := msgs[0].dest
	ans, err := p.send(ctx, dest, msgs)
	if err == nil {
		return p.settle(dest, msgs, ans, errs)
	}
	err = fmt.Errorf("heraldaws: sending to %s %s: %w", p.what, dest, err)
	if ctx.Err() != nil {
		// The caller gave up: not AWS's answer, nor the event's fault.
		for _, m := range msgs {
			errs[m.i] = err
		}
		return 0
	}
	switch judge(err) {
	case invalid:
		if len(msgs) > 1 {
			// AWS refused the whole request over one message it does not
			// say: send each alone, so that only that one fails.
			p.log.Debug("batch request refused; sending its messages one by one", "destination", dest, "batch_size", len(msgs), "error", err)
			n := 0
			for _, m := range msgs {
				n += p.sendChunk(ctx, []*message{m}, errs)
			}
			return n
		}
		errs[msgs[0].i] = herald.Permanent(err)
		return 1
	case unavailable:
		for _, m := range msgs {
			errs[m.i] = herald.Unavailable(err)
		}
		return 0
	}
	for _, m := range msgs {
		errs[m.i] = err
	}
	return len(msgs)
}

// settle sets the errors of a batch request's events from AWS's answer and
// returns how many it answered for. An entry the answer does not mention
// keeps herald.ErrNoAnswer.
func (p *publisher) settle(dest string, msgs []*message, ans answer, errs []error) int {
	entry := func(id string) *message {
		j, err := strconv.Atoi(id)
		if err != nil || j < 0 || j >= len(msgs) || strconv.Itoa(j) != id {
			p.log.Warn("AWS answered for an entry that was not sent", "destination", dest, "entry_id", id)
			return nil
		}
		return msgs[j]
	}
	n := 0
	for _, id := range ans.accepted {
		if m := entry(id); m != nil && errors.Is(errs[m.i], herald.ErrNoAnswer) {
			errs[m.i] = nil
			n++
		}
	}
	for _, r := range ans.refused {
		if m := entry(r.id); m != nil {
			if errs[m.i] == nil {
				n-- // said both: take the refusal
			}
			errs[m.i] = entryError(p.what, dest, p.eventID(m), r.code, r.msg, r.senderFault)
			n++
		}
	}
	return n
}

// eventID is the id of the event m carries, for errors.
func (p *publisher) eventID(m *message) string {
	for _, a := range m.attrs {
		if a.name == herald.HeaderID {
			return a.value
		}
	}
	return "#" + strconv.Itoa(m.i)
}
