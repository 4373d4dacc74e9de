package herald

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// RoundFunc sends one round of a batch: round holds indexes into the batch,
// in batch order. For each event i of the round, errs[i] starts as
// ErrNoAnswer; send sets it to nil once the broker confirmed the event, or
// to the broker's error, so that an event it forgets is never taken as
// delivered. A non-nil return means the publisher cannot go on (its
// connection or channel is gone): no further round is sent, and every
// event without an answer gets that error.
type RoundFunc func(ctx context.Context, round []int, errs []error) error

// SendInRounds is the per-key rule every publisher follows (see
// Publisher): it sends batch in rounds, and never sends an event after an
// earlier event of its ordered key failed.
//
// Each round holds, in batch order, the next perKey unsent events of every
// ordered key (Envelope.Ordered) with no failure so far, and, in the first
// round, every event that is not ordered. Once a round is answered, an
// ordered key with a failed event is closed: its later events are
// reported with an error wrapping ErrHeldBack and are not sent.
//
// perKey below 1 means 1: a key moves one event per round trip, which is
// safe with any broker. A publisher may pass more only when its send
// itself never delivers an event of a key after an earlier one of the
// same round failed (an atomic per-key script, a broker that stops a
// key's pipeline at the first refusal).
//
// It returns one error per event of batch, nil where the broker confirmed
// the event; BatchResult turns them into Publish's return value.
func SendInRounds(ctx context.Context, batch []Envelope, perKey int, send RoundFunc) []error {
	perKey = max(perKey, 1)
	errs := make([]error, len(batch))
	sent := make([]bool, len(batch))
	round := make([]int, 0, len(batch))
	keys := newKeyLists(batch, &round)  // the first round has every unordered event
	open := make([]int, len(keys.head)) // the keys with events left to send
	for q := range open {
		open[q] = q
	}
	for {
		round = keys.take(open, perKey, round)
		if len(round) == 0 {
			return errs
		}
		if err := ctx.Err(); err != nil {
			return notSent(errs, sent, fmt.Errorf("herald: not sent: %w", context.Cause(ctx)))
		}
		for _, i := range round {
			errs[i], sent[i] = ErrNoAnswer, true
		}
		if stop := send(ctx, round, errs); stop != nil {
			for _, i := range round {
				if errors.Is(errs[i], ErrNoAnswer) {
					errs[i] = stop
				}
			}
			return notSent(errs, sent, stop)
		}
		keys.closeFailed(batch, round, errs, sent)
		open, round = keys.stillOpen(open), round[:0]
	}
}

// keyLists holds each ordered key's unsent events of a batch as a list in
// batch order (head, then next), so that a round of SendInRounds costs
// what it sends: a batch of ten keys of a hundred events is a hundred
// rounds, and walking the whole batch for each cost more than sending it
// to a broker on the same machine.
type keyLists struct {
	keyOf      map[TopicKey]int // key -> its index in head and tail
	head, tail []int            // per key: its first and last unsent events, head -1 when none is left
	next       []int            // per event: the next event of its key, -1 for the last
}

// newKeyLists lists batch's ordered events by key, and appends the
// others to unordered.
func newKeyLists(batch []Envelope, unordered *[]int) *keyLists {
	l := &keyLists{
		keyOf: make(map[TopicKey]int, len(batch)), // sized once: a batch of as many keys as events is common
		head:  make([]int, 0, len(batch)),
		tail:  make([]int, 0, len(batch)),
		next:  make([]int, len(batch)),
	}
	for i := range batch {
		l.next[i] = -1
		k, ordered := orderKey(&batch[i])
		if !ordered {
			*unordered = append(*unordered, i)
			continue
		}
		q, ok := l.keyOf[k]
		if !ok {
			l.keyOf[k] = len(l.head)
			l.head, l.tail = append(l.head, i), append(l.tail, i)
			continue
		}
		l.next[l.tail[q]], l.tail[q] = i, i
	}
	return l
}

// take appends to round the next perKey events of every open key and
// returns it in batch order.
func (l *keyLists) take(open []int, perKey int, round []int) []int {
	for _, q := range open {
		for n := 0; n < perKey && l.head[q] >= 0; n++ {
			round = append(round, l.head[q])
			l.head[q] = l.next[l.head[q]]
		}
	}
	if !slices.IsSorted(round) {
		slices.Sort(round)
	}
	return round
}

// closeFailed closes every key with a failed event in round: its later
// events are held back, named after the first of its failures in batch
// order.
func (l *keyLists) closeFailed(batch []Envelope, round []int, errs []error, sent []bool) {
	for _, i := range round {
		k, ordered := orderKey(&batch[i])
		if !ordered || errs[i] == nil {
			continue
		}
		q := l.keyOf[k]
		for later := l.head[q]; later >= 0; later = l.next[later] {
			errs[later], sent[later] = fmt.Errorf("herald: event %s not sent after event %s of its key failed: %w",
				batch[later].ID, batch[i].ID, ErrHeldBack), true
		}
		l.head[q] = -1
	}
}

// stillOpen keeps, of open, the keys with events left to send.
func (l *keyLists) stillOpen(open []int) []int {
	kept := open[:0]
	for _, q := range open {
		if l.head[q] >= 0 {
			kept = append(kept, q)
		}
	}
	return kept
}

// notSent gives every event not yet sent the error err.
func notSent(errs []error, sent []bool, err error) []error {
	for i := range errs {
		if !sent[i] {
			errs[i] = err
		}
	}
	return errs
}

// BatchResult is what Publish returns for per-event results: nil when
// every event was confirmed, a *BatchError otherwise.
func BatchResult(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &BatchError{Errs: errs}
		}
	}
	return nil
}

// EventHeaders calls set for each header of the broker message of env:
// first the producer's headers whose names a producer may use (a row
// written with plain SQL may hold a reserved one, such as Nats-Msg-Id or
// CC: it is dropped), then HeaderBackfill when a backfill wrote the event,
// then Herald's own headers (HeaderID, HeaderTopic, HeaderType, HeaderKey,
// HeaderAggregateType, HeaderAggregateID, HeaderEventVersion,
// HeaderAggregateVersion) from the event's fields, leaving out empty ones. Herald's come last, so they win over any header
// of the same name. Every publisher maps headers through it; their Parse
// functions read the same names back, the versions with ParseVersions.
func EventHeaders(env *Envelope, set func(name, value string)) {
	for name, v := range env.Headers {
		if ValidateHeaderName(name) == nil {
			set(name, v)
		}
	}
	if v := env.Headers[HeaderBackfill]; v != "" {
		set(HeaderBackfill, v)
	}
	for _, h := range [...]struct{ name, v string }{
		{HeaderID, env.ID},
		{HeaderTopic, env.Topic},
		{HeaderType, env.Type},
		{HeaderKey, env.Key},
		{HeaderAggregateType, env.AggregateType},
		{HeaderAggregateID, env.AggregateID},
		{HeaderEventVersion, formatEventVersion(env.EventVersion)},
		{HeaderAggregateVersion, formatAggregateVersion(env.AggregateVersion)},
	} {
		if h.v != "" {
			set(h.name, h.v)
		}
	}
}

// formatEventVersion spells an event version for a header: an envelope
// built by hand without one is version 1, as Prepare would have made it.
func formatEventVersion(v int) string {
	if v <= 0 {
		v = 1
	}
	return strconv.Itoa(v)
}

// formatAggregateVersion spells an aggregate version for a header: "" when
// there is none.
func formatAggregateVersion(v int64) string {
	if v <= 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

// ParseVersions reads back the values of HeaderEventVersion and
// HeaderAggregateVersion of a received message, for a publisher's Parse.
// An absent event version is 1 (a message published before versions were
// carried); an absent aggregate version is 0, none. Anything but a decimal
// number in range is an error naming the header.
func ParseVersions(eventVersion, aggregateVersion string) (event int, aggregate int64, err error) {
	event = 1
	if eventVersion != "" {
		n, err := strconv.ParseInt(eventVersion, 10, 32)
		if err != nil || n < 1 || eventVersion[0] == '+' {
			return 0, 0, fmt.Errorf("header %s is %.32q, not a version from 1 to %d", HeaderEventVersion, eventVersion, MaxEventVersion)
		}
		event = int(n)
	}
	if aggregateVersion != "" {
		n, err := strconv.ParseInt(aggregateVersion, 10, 64)
		if err != nil || n < 1 || aggregateVersion[0] == '+' {
			return 0, 0, fmt.Errorf("header %s is %.32q, not a positive version", HeaderAggregateVersion, aggregateVersion)
		}
		aggregate = n
	}
	return event, aggregate, nil
}
