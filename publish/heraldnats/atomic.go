package heraldnats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
)

// Atomic batch publish (Config.AtomicBatches), as nats-server 2.12 and
// later implement it (server/stream.go, processJetStreamAtomicBatchMsg):
//
//   - Every message of a batch carries Nats-Batch-Id (at most 64
//     characters) and Nats-Batch-Sequence (1, 2, ...); the last one also
//     Nats-Batch-Commit: 1. The stream stages the messages and, on the
//     commit, checks all of them and stores all of them, or none.
//   - Only the messages sent with a reply subject are answered: Herald
//     sends the commit alone as a request. Its answer is a PubAck with
//     "batch" and "count", or a JetStream error for the whole batch.
//   - A message the stream refuses before staging (over its MaxMsgSize)
//     is answered on its own reply subject, which Herald's messages do not
//     have; the next message then finds a gap and the batch is abandoned,
//     so the commit is answered "batch is incomplete" (10176). When the
//     refused message is the commit itself, its answer is the refusal and
//     the staged messages wait for the server's batch timeout (10s).
//   - A message whose Nats-Msg-Id is already in the stream's duplicate
//     window makes the whole batch fail at the commit (10201); nothing of
//     it is stored.
//   - A batch goes to one stream: a message another stream captures is a
//     gap for this one.
//   - Limits, from the server's jetstream limits: max_batch_size messages
//     per batch (default 1000; more is refused with 10199), 50 batches
//     being staged per stream and 1000 per server (more is refused with
//     429, 10210), and 10s without a message abandons a batch.
//   - A stream without allow_atomic refuses the batch (10174).
//
// Publish sends an atomic batch per subject, so that it always goes to one
// stream, and every ordered key has one subject (its topic). A refusal of
// a whole batch (too many in flight, a full intake queue, an unavailable
// JetStream) is reported for it like a refused round, with
// herald.Unavailable; any other refusal is not one event's, so Publish
// sends the batch's events again in rounds, where each gets its own answer
// and the stream drops those it had already stored by their Nats-Msg-Id.
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"

	// DefaultAtomicBatchSize is Config.AtomicBatchSize's default: the
	// server's default max_batch_size.
	DefaultAtomicBatchSize = 1000
	// atomicGroupsPerStep bounds the atomic batches Publish has in flight
	// at once, well under the server's 50 per stream.
	atomicGroupsPerStep = 8
	// batchHeaderBytes is what the batch headers add to a message, at most:
	// weighed against MaxMessageBytes and the connection's max payload.
	batchHeaderBytes = len(headerBatchID+": \r\n") + 36 + len(headerBatchSeq+": \r\n") + 20 + len(headerBatchCommit+": 1\r\n")
	// atomicOffFor is how long a subject whose stream refused atomic
	// batches (no allow_atomic) is sent in rounds before Publish tries
	// again.
	atomicOffFor = time.Minute
)

// JetStream error codes of atomic batch publish (nats-server's
// errors.json).
const (
	errCodeAtomicDisabled jetstream.ErrorCode = 10174
)

// atomicGroup is one atomic batch of a step: events of one subject, in
// batch order.
type atomicGroup struct {
	subject string
	idx     []int
	msgs    []*nats.Msg
	bytes   int
}

// step is what sendAtomic sends at once: atomic batches, and single
// events sent as a round (events that cannot go in a batch, and batches
// of one). An ordered key is in one of them only, so no event of a key
// can be stored after a refused earlier one of the same step.
type step struct {
	groups  []*atomicGroup
	singles []int
}

// sendAtomic is Publish with Config.AtomicBatches: the batch goes in steps
// (see step) until every event has an answer. It returns one error per
// event and, when the connection was lost, that error.
func (p *Publisher) sendAtomic(ctx context.Context, batch []herald.Envelope, closed <-chan nats.Status) (errs []error, stats atomicStats, lost error) {
	errs = make([]error, len(batch))
	done := make([]bool, len(batch))
	failed := map[string]string{} // ordered key -> id of its failed event
	for {
		s := p.nextStep(batch, done, failed, errs)
		if len(s.groups) == 0 && len(s.singles) == 0 {
			return errs, stats, nil
		}
		if ctx.Err() != nil {
			break
		}
		if stats.steps > 0 {
			if lost = p.checkConnected(); lost != nil {
				return unanswered(errs, done, lost), stats, lost
			}
		}
		stats.steps++
		lost = p.sendStep(ctx, batch, s, errs, done, closed, &stats)
		if lost != nil {
			return unanswered(errs, done, lost), stats, lost
		}
		for _, g := range s.groups {
			closeFailed(batch, g.idx, errs, failed)
		}
		closeFailed(batch, s.singles, errs, failed)
	}
	// The context ended: each event without an answer says so, and the
	// connection is fine.
	return unanswered(errs, done, unconfirmed(ctx)), stats, nil //nolint:nilerr // the context's end is reported per event, as a round does

}

// atomicStats counts what sendAtomic did, for the debug log.
type atomicStats struct {
	steps, batches, fallbacks int
}

// nextStep picks the events of the next step, in batch order: for each
// ordered key the longest run of its next events that fits one atomic
// batch of its subject, or its next event alone when it cannot go in a
// batch. Events of a key with a failed event are held back (errs set).
func (p *Publisher) nextStep(batch []herald.Envelope, done []bool, failed map[string]string, errs []error) step {
	var (
		s       step
		groups  = map[string]*atomicGroup{}
		inGroup = map[string]*atomicGroup{} // ordered key -> its batch in this step
		blocked = map[string]bool{}         // ordered keys that take no more events in this step
	)
	for i := range batch {
		if done[i] {
			continue
		}
		env := &batch[i]
		k := orderKey(env)
		if k != "" && failed[k] != "" {
			errs[i], done[i] = fmt.Errorf("heraldnats: event %s not sent after event %s of its key failed: %w",
				env.ID, failed[k], herald.ErrHeldBack), true
			continue
		}
		if blocked[k] && k != "" {
			continue
		}
		subj := p.prefix + env.Topic
		msg, ok := p.batchable(subj, env)
		if !ok {
			if k != "" {
				if inGroup[k] != nil {
					blocked[k] = true
					continue
				}
				blocked[k] = true
			}
			s.singles = append(s.singles, i)
			errs[i], done[i] = herald.ErrNoAnswer, true
			continue
		}
		g := groups[subj]
		if g == nil && len(groups) < atomicGroupsPerStep && (k == "" || inGroup[k] == nil) {
			g = &atomicGroup{subject: subj}
			groups[subj] = g
			s.groups = append(s.groups, g)
		}
		size := messageSize(msg)
		if g == nil || (k != "" && inGroup[k] != nil && inGroup[k] != g) || !g.fits(size, p.atomicSize, p.pending.max) {
			if k != "" {
				blocked[k] = true
			}
			continue
		}
		g.idx, g.msgs, g.bytes = append(g.idx, i), append(g.msgs, msg), g.bytes+size
		errs[i], done[i] = herald.ErrNoAnswer, true
		if k != "" {
			inGroup[k] = g
		}
	}
	// A batch of one is sent as a plain message: the stream stages nothing.
	kept := s.groups[:0]
	for _, g := range s.groups {
		if len(g.idx) == 1 {
			s.singles = append(s.singles, g.idx[0])
			continue
		}
		kept = append(kept, g)
	}
	s.groups = kept
	return s
}

func (g *atomicGroup) fits(size, maxMsgs, maxBytes int) bool {
	return len(g.idx) == 0 || (len(g.idx) < maxMsgs && g.bytes+size <= maxBytes)
}

// batchable returns the message for env when it may go in an atomic
// batch: a valid subject whose stream was not found refusing atomic
// batches, and a size that is refused neither by MaxMessageBytes nor by
// the connection. Any other event is sent alone, where it gets its own
// answer.
func (p *Publisher) batchable(subj string, env *herald.Envelope) (*nats.Msg, bool) {
	if checkSubject(subj) != "" || p.atomicOff(subj) {
		return nil, false
	}
	msg := p.message(subj, env)
	size := messageSize(msg) + batchHeaderBytes
	if (p.maxBytes > 0 && size > p.maxBytes) || int64(size) > p.nc.MaxPayload() {
		return nil, false
	}
	return msg, true
}

// sendStep sends the step's atomic batches, each from its own goroutine,
// and its single events as a round, then waits for every answer. A batch
// the stream refused for a reason that is not load is sent again in
// rounds. It returns an error only when the connection was lost.
func (p *Publisher) sendStep(ctx context.Context, batch []herald.Envelope, s step, errs []error, done []bool,
	closed <-chan nats.Status, stats *atomicStats,
) error {
	results := make([]error, len(s.groups))
	var wg sync.WaitGroup
	for n, g := range s.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[n] = p.commitGroup(ctx, g)
		}()
	}
	var lost error
	if len(s.singles) > 0 {
		_, lost = p.sendRound(ctx, batch, s.singles, errs, closed)
	}
	wg.Wait()
	stats.batches += len(s.groups)
	var fallback []*atomicGroup
	for n, g := range s.groups {
		switch err := results[n]; {
		case err == nil:
			for _, i := range g.idx {
				errs[i] = nil
			}
			p.streamFound(g.subject)
		case connectionLost(err):
			for _, i := range g.idx {
				done[i] = false
			}
			if lost == nil {
				lost = fmt.Errorf("heraldnats: connection lost awaiting atomic batch commit: %w", err)
			}
		case !fallBack(err):
			groupFailed(batch, g.idx, errs, err)
		default:
			p.log.Debug("atomic batch refused; sending its events in rounds", "subject", g.subject, "batch_size", len(g.idx), "error", err)
			fallback = append(fallback, g)
		}
	}
	for _, g := range fallback {
		if lost != nil {
			// Left to the relay's retry of the batch.
			for _, i := range g.idx {
				done[i] = false
			}
			continue
		}
		stats.fallbacks++
		lost = p.sendRounds(ctx, batch, g.idx, errs, closed)
	}
	return lost
}

// sendRounds sends the events batch[i], i in idx, in rounds, as Publish
// does without atomic batches.
func (p *Publisher) sendRounds(ctx context.Context, batch []herald.Envelope, idx []int, errs []error, closed <-chan nats.Status) error {
	sub := make([]herald.Envelope, len(idx))
	for n, i := range idx {
		sub[n] = batch[i]
	}
	var lost error
	subErrs := herald.SendInRounds(ctx, sub, 1, func(ctx context.Context, round []int, errs []error) error {
		_, lost = p.sendRound(ctx, sub, round, errs, closed)
		return lost
	})
	for n, i := range idx {
		errs[i] = subErrs[n]
	}
	return lost
}

// commitGroup sends g as one atomic batch and returns nil once the stream
// stored all of it, or why it stored none of it (or cannot say: a timeout,
// a lost connection).
func (p *Publisher) commitGroup(ctx context.Context, g *atomicGroup) error {
	id := uuid.NewString()
	for n, m := range g.msgs {
		m.Header[headerBatchID] = []string{id}
		m.Header[headerBatchSeq] = []string{strconv.Itoa(n + 1)}
	}
	last := g.msgs[len(g.msgs)-1]
	last.Header[headerBatchCommit] = []string{"1"}
	if err := p.pending.acquire(ctx, last, g.bytes); err != nil {
		return unconfirmed(ctx)
	}
	defer p.pending.release(last)

	for _, m := range g.msgs[:len(g.msgs)-1] {
		if err := p.nc.PublishMsg(m); err != nil {
			if connectionLost(err) {
				return err
			}
			// The batch has a gap now: the stream abandons it.
			return fmt.Errorf("heraldnats: publishing atomic batch to %q: %w", g.subject, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, p.ackTimeout)
	defer cancel()
	reply, err := p.nc.RequestMsgWithContext(rctx, last)
	switch {
	case err == nil:
		return p.commitAnswer(g, reply)
	case ctx.Err() != nil:
		return unconfirmed(ctx)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("heraldnats: no answer to the atomic batch commit for %q within %s: %w", g.subject, p.ackTimeout, err)
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("heraldnats: no JetStream stream captures subject %q: %w", g.subject, err)
	}
	return err
}

// commitAnswer reads the answer to a commit: nil when the stream stored
// the whole batch, else its error.
func (p *Publisher) commitAnswer(g *atomicGroup, reply *nats.Msg) error {
	var ack struct {
		Error *jetstream.APIError `json:"error"`
		Batch string              `json:"batch"`
		Count int                 `json:"count"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return fmt.Errorf("heraldnats: reading the answer to the atomic batch commit for %q: %w", g.subject, err)
	}
	if ack.Error != nil {
		if ack.Error.ErrorCode == errCodeAtomicDisabled {
			p.setAtomicOff(g.subject)
		}
		return fmt.Errorf("heraldnats: atomic batch to %q refused: %w", g.subject, ack.Error)
	}
	if ack.Count != len(g.msgs) {
		return fmt.Errorf("heraldnats: atomic batch to %q: the stream stored %d messages, not %d", g.subject, ack.Count, len(g.msgs))
	}
	return nil
}

// fallBack reports whether the events of a refused atomic batch are sent
// again in rounds: unless the stream said it is busy, or gave no answer.
func fallBack(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && busy(apiErr):
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// groupFailed reports err, as a round would, for a batch that failed as a
// whole: for the first event of each ordered key, and for every unordered
// event; the later events of a key are held back behind its first.
func groupFailed(batch []herald.Envelope, idx []int, errs []error, err error) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && busy(apiErr) {
		err = herald.Unavailable(fmt.Errorf("heraldnats: JetStream is busy: %w", err))
	}
	first := map[string]string{}
	for _, i := range idx {
		k := orderKey(&batch[i])
		if k == "" {
			errs[i] = err
			continue
		}
		if id, ok := first[k]; ok {
			errs[i] = fmt.Errorf("heraldnats: event %s not sent after event %s of its key failed: %w", batch[i].ID, id, herald.ErrHeldBack)
			continue
		}
		first[k] = batch[i].ID
		errs[i] = err
	}
}

// closeFailed records, for the events batch[i], i in idx, the ordered keys
// that have a failed event.
func closeFailed(batch []herald.Envelope, idx []int, errs []error, failed map[string]string) {
	for _, i := range idx {
		if k := orderKey(&batch[i]); k != "" && errs[i] != nil && failed[k] == "" {
			failed[k] = batch[i].ID
		}
	}
}

// unanswered gives every event without an answer the error err: those
// not sent, and those sent whose answer is still herald.ErrNoAnswer.
func unanswered(errs []error, done []bool, err error) []error {
	for i := range errs {
		if !done[i] || errors.Is(errs[i], herald.ErrNoAnswer) {
			errs[i] = err
		}
	}
	return errs
}

// orderKey is the relay's: the events of one topic and key, when ordered,
// must arrive in batch order.
func orderKey(env *herald.Envelope) string {
	if !env.Ordered || env.Key == "" {
		return ""
	}
	return env.Topic + "\x00" + env.Key
}

// atomicOff reports whether subj's stream refused an atomic batch less
// than atomicOffFor ago.
func (p *Publisher) atomicOff(subj string) bool {
	p.atomicOffMu.Lock()
	defer p.atomicOffMu.Unlock()
	at, ok := p.atomicOffAt[subj]
	return ok && time.Since(at) < atomicOffFor
}

func (p *Publisher) setAtomicOff(subj string) {
	now := time.Now()
	p.atomicOffMu.Lock()
	if len(p.atomicOffAt) >= noStreamLogMax {
		for s, at := range p.atomicOffAt {
			if now.Sub(at) >= atomicOffFor {
				delete(p.atomicOffAt, s)
			}
		}
	}
	p.atomicOffAt[subj] = now
	p.atomicOffMu.Unlock()
	p.log.Warn("the stream of this subject does not allow atomic batches (allow_atomic); sending in rounds", "subject", subj)
}
