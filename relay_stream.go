package herald

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// streamLoop publishes the batches of RelayConfig.Source, one at a time, in
// commit order, while the claim loops go on claiming what the table holds:
// rows written for polling, and the events this loop hands back to it.
//
// One batch at a time is what keeps a key in order across the two paths.
// Before a batch is published, the table is asked which of its keys have
// events waiting there (ready, claimed or parked); those keys' events are
// written back behind them instead of being sent. A key gets events in
// the table only from this loop (a failure, or what follows one) or from
// rows committed before the streamed ones, which the check sees. With the
// next batch read only once this one is published or written back, no
// streamed event can overtake an earlier event of its key.
func (r *Relay) streamLoop(ctx context.Context) {
	errDelay := r.cfg.PollInterval
	for {
		if wait := r.outageWait(); wait > 0 && !r.sleep(ctx, wait) {
			return
		}
		// One batch in flight, as large as the claims' batches in flight
		// together (RelayConfig.Source).
		b, err := r.cfg.Source.Next(ctx, r.cfg.BatchSize*r.cfg.MaxInFlight)
		if ctx.Err() != nil {
			// A batch read as the relay stops is not done: the source hands
			// it out again on the next start.
			return
		}
		if err != nil {
			r.log.Warn("reading the change stream failed; retrying", "error", Scrub(err.Error()))
			if !r.sleep(ctx, errDelay) {
				return
			}
			errDelay = min(errDelay*2, r.cfg.OutageBackoffCap)
			continue
		}
		errDelay = r.cfg.PollInterval
		switch r.streamBatch(ctx, b) {
		case batchStopped:
			return
		case batchAbandoned:
			r.log.Warn("the database does not answer: gave up a change-stream batch unsettled; it comes again once the stream reconnects",
				"events", len(b.Events))
			b.Abandon()
		}
	}
}

// batchEnd is how the relay left a batch of its source.
type batchEnd int

const (
	batchSettled   batchEnd = iota // every event published or written back, and Done called
	batchAbandoned                 // the database stopped answering: Abandon is to be called
	batchStopped                   // the relay stopped first: the batch stays undone
)

// abandonAfter is how long the database may fail a streamed batch's reads
// and writes before the relay gives the batch up (when its source can take
// it back): long enough to ride out a dropped connection, short enough
// that a database shutting down is not kept waiting for its log reader.
const abandonAfter = time.Second

// streamBatch publishes one batch of the source and writes back, to the
// table, every event that was not published; then it tells the source the
// batch is done. A batch the relay could not settle (it stopped, or the
// database stopped answering) is left undone, for the source to hand out
// again.
func (r *Relay) streamBatch(ctx context.Context, b SourceBatch) batchEnd {
	c := claimed{token: "stream", batch: b.Events, deadline: r.cfg.Clock.Now().Add(r.cfg.PublishTimeout)}
	for i := range c.batch {
		env := &c.batch[i]
		env.Ordered = !r.cfg.Unordered && env.Key != "" && !r.unordered[env.Topic]
		c.bytes += envelopeBytes(env)
	}
	r.stats.streamed.Add(int64(len(c.batch)))
	r.inFlight.Add(int64(len(c.batch)))
	r.inFlightBytes.Add(c.bytes)
	defer r.release(c)
	if len(c.batch) > 0 {
		r.noteClaim(r.cfg.Clock.Now())
		if h := r.hooks.claimed; h != nil {
			h.Claimed(c.batch)
		}
	}

	giveUp := time.Duration(0)
	if b.Abandon != nil {
		giveUp = abandonAfter
	}
	held, end := r.streamHeld(ctx, c.batch, giveUp)
	if end != batchSettled {
		return end
	}
	errs, whole := r.sendStreamed(c, held)
	d := decide(c.batch, errs, r.decideRules(whole))
	r.logDecision(c, d)
	failed := slices.Concat(d.Params.Failed, b.Unreadable)
	if len(failed) > 0 {
		if end := r.returnToTable(ctx, c.batch, failed, giveUp); end != batchSettled {
			return end
		}
	}
	if b.Done != nil {
		b.Done()
	}
	res := CompleteResult{Published: len(d.Params.Published)}
	for _, f := range failed {
		res.Failed = append(res.Failed, f.ID)
	}
	p := CompleteParams{Published: d.Params.Published, Failed: failed}
	changed := setOf(res.Failed)
	r.count(p, res, changed)
	if h := r.hooks.acknowledged; h != nil {
		h.Acknowledged(acknowledgement(c.batch, d.Params, changed, 0))
	}
	return batchSettled
}

// sendStreamed publishes the events of the batch that are not held, and
// returns each event's error: ErrHeldBack for the held ones.
func (r *Relay) sendStreamed(c claimed, held []bool) (errs []error, whole error) {
	send := c
	send.batch = make([]Envelope, 0, len(c.batch))
	var idx []int
	for i := range c.batch {
		if !held[i] {
			send.batch = append(send.batch, c.batch[i])
			idx = append(idx, i)
		}
	}
	errs = make([]error, len(c.batch))
	for i := range errs {
		if held[i] {
			errs[i] = ErrHeldBack
		}
	}
	if len(send.batch) == 0 {
		return errs, nil
	}
	sent, whole := r.send(send)
	for j, i := range idx {
		errs[i] = sent[j]
	}
	return errs, whole
}

// streamHeld says which events of a streamed batch go to the table unsent:
// those of a paused topic or destination, those not due yet
// (Message.AvailableAt), and the ordered ones whose key has events waiting
// in the table or an event not due earlier in the batch. Its batchEnd says
// why the table did not answer, if it did not.
func (r *Relay) streamHeld(ctx context.Context, batch []Envelope, giveUp time.Duration) ([]bool, batchEnd) {
	var paused []string
	end := r.untilStored(ctx, giveUp, "reading the pauses", func(ctx context.Context) (err error) {
		paused, err = r.pausedTopics(ctx)
		return err
	})
	if end != batchSettled {
		return nil, end
	}
	isPaused := setOf(paused)
	waiting, end := r.keysWaiting(ctx, batch, isPaused, giveUp)
	if end != batchSettled {
		return nil, end
	}
	held := notDue(batch, r.cfg.Clock.Now())
	send, byDestination := r.heldByDestination(batch)
	var sent map[string]bool // nil when no destination holds any
	if len(byDestination) > 0 {
		sent = make(map[string]bool, len(send))
		for _, env := range send {
			sent[env.ID] = true
		}
	}
	for i, env := range batch {
		held[i] = held[i] || isPaused[env.Topic] || (sent != nil && !sent[env.ID]) ||
			(env.Ordered && waiting[TopicKey{env.Topic, env.Key}])
	}
	return held, batchSettled
}

// keysWaiting asks the table which ordered keys of the batch, of topics
// not paused, have events waiting there (StreamStore.KeysWaiting).
func (r *Relay) keysWaiting(ctx context.Context, batch []Envelope, isPaused map[string]bool, giveUp time.Duration) (map[TopicKey]bool, batchEnd) {
	var (
		keys    []TopicKey
		seen    = map[TopicKey]bool{}
		waiting map[TopicKey]bool
	)
	for _, env := range batch {
		k := TopicKey{env.Topic, env.Key}
		if env.Ordered && !isPaused[env.Topic] && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, batchSettled
	}
	end := r.untilStored(ctx, giveUp, "reading the keys waiting in the table", func(ctx context.Context) error {
		w, err := r.cfg.Store.(StreamStore).KeysWaiting(ctx, keys)
		waiting = make(map[TopicKey]bool, len(w))
		for _, k := range w {
			waiting[k] = true
		}
		return err
	})
	return waiting, end
}

// notDue marks the events of the batch that are not due at now, and the
// later events of an ordered key after one that is not.
func notDue(batch []Envelope, now time.Time) []bool {
	held := make([]bool, len(batch))
	keys := map[TopicKey]bool{} // ordered keys with an event not due
	for i := range batch {
		env := &batch[i]
		k := TopicKey{env.Topic, env.Key}
		if !due(env, now) || (env.Ordered && keys[k]) {
			held[i] = true
			if env.Ordered {
				keys[k] = true
			}
		}
	}
	return held
}

// due reports whether a streamed event may be published at now: it was
// written without a delay (its AvailableAt, if any, is not after its
// CreatedAt: the column's default is the insert's now(), the database
// clock, which the relay's clock need not match), or its AvailableAt has
// passed. An event not due is written back held, keeping its AvailableAt
// (StreamStore.Return), and a claim publishes it once it is due, as
// polling would.
func due(env *Envelope, now time.Time) bool {
	return env.AvailableAt.IsZero() || !env.AvailableAt.After(env.CreatedAt) || !env.AvailableAt.After(now)
}

// returnToTable writes the events of a streamed batch that were not
// published back to the table, with their outcomes.
func (r *Relay) returnToTable(ctx context.Context, batch []Envelope, failed []Failure, giveUp time.Duration) batchEnd {
	p := ReturnParams{Failed: failed}
	ids := setOf(nil)
	for _, f := range failed {
		ids[f.ID] = true
	}
	for _, env := range batch {
		if ids[env.ID] {
			p.Events = append(p.Events, env)
		}
	}
	return r.untilStored(ctx, giveUp, "writing failed streamed events back to the table", func(ctx context.Context) error {
		_, err := r.cfg.Store.(StreamStore).Return(ctx, p)
		return err
	})
}

// untilStored runs op until it succeeds. A streamed batch cannot be
// skipped, or its events would be lost, nor can a later one go first, or
// a key would lose its order: so op is retried, with a doubling pause,
// while the database is unreachable. It gives up once the relay is
// stopping (ctx ended) and op failed, or once op has failed for giveUp
// (0: never): the batch then stays undone, and comes again from the
// source.
func (r *Relay) untilStored(ctx context.Context, giveUp time.Duration, what string, op func(context.Context) error) batchEnd {
	delay := 50 * time.Millisecond
	var failingSince time.Time
	for {
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
		err := op(opCtx)
		cancel()
		r.noteDatabase(err)
		if err == nil {
			return batchSettled
		}
		now := r.cfg.Clock.Now()
		if failingSince.IsZero() {
			failingSince = now
		}
		switch {
		case ctx.Err() != nil:
			r.log.Warn(what+" failed as the relay stops; the batch will be read again from the change stream",
				"error", Scrub(err.Error()))
			return batchStopped
		case giveUp > 0 && now.Sub(failingSince) >= giveUp:
			return batchAbandoned
		}
		r.log.Debug(what+" failed; retrying", "error", Scrub(err.Error()))
		select {
		case <-r.cfg.Clock.After(delay):
		case <-ctx.Done():
		}
		delay = min(delay*2, r.cfg.OutageBackoffCap)
	}
}

// switchPaths is Start's side of StreamSwitch. The order is the rule: a
// Source has its place in the log before it is configured, so inserts
// turned streamed here are read from there. Turned streamed before that
// place existed, those committed in between would be rows no claim takes
// and no log reader reaches (heraldcdc refuses to make a slot for such a
// table).
func (r *Relay) switchPaths(ctx context.Context) error {
	sw, ok := r.cfg.Store.(StreamSwitch)
	if !ok {
		return nil
	}
	if r.cfg.Source != nil {
		if err := sw.StreamInserts(ctx, true); err != nil {
			return fmt.Errorf("herald: making the inserts of %s streamed for RelayConfig.Source: %w", sw.Table(), err)
		}
		return nil
	}
	on, err := sw.InsertsStreamed(ctx)
	if err != nil {
		return fmt.Errorf("herald: reading whether the inserts of %s are streamed: %w", sw.Table(), err)
	}
	if on {
		return fmt.Errorf("herald: table %s is relayed by change-data-capture (its inserts default to the streamed state, which no claim takes): "+
			"a relay without RelayConfig.Source would never see its new events. Start it with a Source (heraldcdc; herald relay --source cdc), "+
			"or switch the table back to polling first (herald source poll)", sw.Table())
	}
	return nil
}
