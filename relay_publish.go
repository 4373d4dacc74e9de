package herald

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// maxStoredPayload is the payload cap applied to claimed rows: the writer's
// cap is the writer's business; the relay refuses only what no broker takes.
const maxStoredPayload = 64 << 20

// process publishes one claimed batch, decides what becomes of each event
// and writes it down. It calls sent once the publisher is done with the
// batch, unless the batch is given up before.
func (r *Relay) process(c claimed, sent func()) {
	if !r.cfg.Clock.Now().Before(c.deadline) {
		// The process was paused or starved past its lease: another relay
		// may be publishing these events already, so sending them now could
		// only put them on the broker twice and out of order.
		r.log.Warn("lease expired before publishing; leaving the batch to the rescuer",
			"rows", len(c.batch), "claim_token", c.token)
		return
	}
	errs, whole := r.send(c)
	d := decide(c.batch, errs, r.decideRules(whole))
	r.logDecision(c, d)
	// Sent and decided, the batch gives its publish slot to the next claim
	// while its acknowledgement is written: the acknowledgement of one
	// batch overlaps the claim and publication of the next. At most
	// MaxInFlight batches wait for their acknowledgement; their rows stay
	// claimed until then, so no key moves on before it.
	r.acking <- struct{}{}
	sent()
	defer func() { <-r.acking }()
	r.acknowledge(c, d)
}

// send hands the batch's valid events to the publisher and returns each
// event's error, and the publisher's error when it failed the batch as a
// whole with an ordinary error (an outage).
//
// Rows written by other programs with plain SQL may break the rules
// WriteTx enforces (a reserved header, a topic with spaces). They go to
// the dead letters with the reason instead of reaching the broker, as do
// events a Source could not read whole (UnreadableHeader); in an ordered
// claim, the later events of their key are held back unsent.
func (r *Relay) send(c claimed) (errs []error, whole error) {
	errs = make([]error, len(c.batch))
	var (
		invalidKeys map[TopicKey]bool
		sent        []int // indexes into c.batch of the events handed to the publisher
	)
	for i := range c.batch {
		env := &c.batch[i]
		k, ordered := orderKey(env)
		if ordered && invalidKeys[k] {
			errs[i] = ErrHeldBack
			continue
		}
		if err := validateMessage(i, &env.Message, maxStoredPayload, true); err != nil {
			// A Source's unreadable mark is no valid header name, so only
			// an event the validation refuses can carry one.
			if errs[i] = unreadable(&env.Message); errs[i] == nil {
				errs[i] = Permanent(invalidRow(err))
			}
			if ordered {
				if invalidKeys == nil {
					invalidKeys = map[TopicKey]bool{}
				}
				invalidKeys[k] = true
			}
			continue
		}
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return errs, nil
	}
	valid := c.batch
	if len(sent) < len(c.batch) {
		valid = make([]Envelope, len(sent))
		for j, i := range sent {
			valid[j] = c.batch[i]
		}
	}
	// Publishing past the lease could race the relay that rescued the rows,
	// so the publish ends with the lease at the latest.
	ctx, cancel := context.WithTimeout(r.pubCtx, min(r.cfg.PublishTimeout, c.deadline.Sub(r.cfg.Clock.Now())))
	err := r.publish(ctx, valid)
	cancel()
	for j, e := range batchErrors(err, len(sent)) {
		errs[sent[j]] = e
	}
	if err != nil && !isBatchError(err) && !IsPermanent(err) {
		whole = err
	}
	return errs, whole
}

// invalidRow is why a row that breaks WriteTx's rules is dead: the field
// and the reason ("invalid row: topic: contains whitespace ..."), without
// the index a ValidationError gives for a WriteTx call, which in a dead
// letter would be the row's place in a batch and mean nothing.
func invalidRow(err error) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("invalid row: %s: %s", ve.Field, ve.Reason)
	}
	return fmt.Errorf("invalid row: %w", err)
}

// publish calls the publisher. A panic in it fails the batch's events (an
// attempt each) instead of taking down the relay and everything it relays.
func (r *Relay) publish(ctx context.Context, batch []Envelope) (err error) {
	defer func() {
		if p := recover(); p != nil {
			errs := make([]error, len(batch))
			for i := range errs {
				errs[i] = fmt.Errorf("publisher panicked: %v", p)
			}
			err = &BatchError{Errs: errs}
		}
	}()
	return r.cfg.Publisher.Publish(ctx, batch)
}

// logDecision logs what went wrong in a batch, and clears an outage once a
// batch went through with no event failing.
func (r *Relay) logDecision(c claimed, d decision) {
	if d.OrderBroken > 0 {
		r.log.Error("publisher delivered events after an earlier event of their key failed; per-key order is broken on the broker",
			"events", d.OrderBroken, "claim_token", c.token)
	}
	var (
		failed, held int
		first        string
	)
	for _, f := range d.Params.Failed {
		if f.Outcome == OutcomeReleased {
			continue // not a failure: the relay is stopping
		}
		if failed == 0 || (first == ErrHeldBack.Error() && f.Outcome != OutcomeHeldBack) {
			first = f.Error
		}
		failed++
		if f.Outcome == OutcomeHeldBack {
			held++
		}
	}
	if failed == 0 {
		r.clearOutage()
		return
	}
	if held == failed {
		// Nothing failed: events were kept back unsent, behind an earlier
		// event of their key, or (from a change stream) for a paused topic
		// or a delay not over yet.
		r.log.Debug("events held back", "held", held, "batch_size", len(c.batch))
		return
	}
	// An outage is logged once, when it begins and when it ends; the
	// batches it fails in between only at Debug.
	level := slog.LevelWarn
	if d.Outage {
		level = slog.LevelDebug
	}
	r.log.Log(context.Background(), level, "publish failed", "failed", failed, "batch_size", len(c.batch),
		"outage", d.Outage, "error", first)
}

func isBatchError(err error) bool {
	var be *BatchError
	return errors.As(err, &be)
}

// batchErrors spreads a Publish result over the batch.
func batchErrors(err error, n int) []error {
	errs := make([]error, n)
	if err == nil {
		return errs
	}
	var be *BatchError
	if errors.As(err, &be) && len(be.Errs) == n {
		copy(errs, be.Errs)
		return errs
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}
