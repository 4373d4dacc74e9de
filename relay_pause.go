package herald

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// PauseRefresh is how often a relay reads the pauses operators set
// (herald pause, the admin page): a pause or a resume takes effect on
// every relay within it. Batches claimed before a pause took effect are
// still published.
const PauseRefresh = time.Second

// pauses is what the relay knows of the operators' pauses, read from the
// store at most once per PauseRefresh.
type pauses struct {
	mu     sync.Mutex
	loaded bool
	next   time.Time       // by the relay's clock: when to read them again
	topics []string        // paused topics, destinations' included, sorted
	dests  map[string]bool // paused destinations

	resumed    map[string]time.Time // topic -> when its pause last ended
	destResume map[string]time.Time // destination -> when its pause last ended
}

// pausedTopics returns the topics claims must leave alone, reading the
// pauses again when PauseRefresh has passed. A failed read fails the
// claim: claiming without knowing the pauses could publish a paused
// topic's events.
func (r *Relay) pausedTopics(ctx context.Context) ([]string, error) {
	p := &r.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	now := r.cfg.Clock.Now()
	if p.loaded && now.Before(p.next) {
		return p.topics, nil
	}
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
	defer cancel()
	read, err := r.readPauses(readCtx)
	if err != nil {
		return nil, fmt.Errorf("reading pauses: %w", err)
	}
	// A topic found routed to a paused destination stays paused while the
	// destination is, even if a read of the ready topics missed it (its
	// events were claimed at that moment, on their way back).
	for _, t := range p.topics {
		if r.cfg.DestinationOf != nil && read.dests[r.cfg.DestinationOf(t)] && !slices.Contains(read.topics, t) {
			read.topics = append(read.topics, t)
		}
	}
	slices.Sort(read.topics)
	r.logPauseChanges(p.topics, read.topics, p.loaded)
	p.loaded, p.next = true, now.Add(PauseRefresh)
	p.topics, p.dests, p.resumed, p.destResume = read.topics, read.dests, read.resumed, read.destResume
	return read.topics, nil
}

// pauseRead is what one read of the pauses found.
type pauseRead struct {
	topics     []string
	dests      map[string]bool
	resumed    map[string]time.Time
	destResume map[string]time.Time
}

// readPauses reads the pauses and turns paused destinations into the
// topics with ready events that route to them.
func (r *Relay) readPauses(ctx context.Context) (pauseRead, error) {
	ps, err := r.cfg.Store.Pauses(ctx)
	if err != nil {
		return pauseRead{}, err
	}
	out := pauseRead{dests: map[string]bool{}, resumed: map[string]time.Time{}, destResume: map[string]time.Time{}}
	for _, pa := range ps {
		switch {
		case pa.Kind == PauseTopic && pa.Paused:
			out.topics = append(out.topics, pa.Name)
		case pa.Kind == PauseDestination && pa.Paused:
			out.dests[pa.Name] = true
		case pa.Kind == PauseTopic && !pa.Resumed.IsZero():
			out.resumed[pa.Name] = pa.Resumed
		case pa.Kind == PauseDestination && !pa.Resumed.IsZero():
			out.destResume[pa.Name] = pa.Resumed
		}
	}
	if len(out.dests) > 0 && r.cfg.DestinationOf != nil {
		ready, err := r.cfg.Store.ReadyTopics(ctx)
		if err != nil {
			return pauseRead{}, err
		}
		for _, t := range ready {
			if out.dests[r.cfg.DestinationOf(t)] {
				out.topics = append(out.topics, t)
			}
		}
	}
	slices.Sort(out.topics)
	out.topics = slices.Compact(out.topics)
	return out, nil
}

// heldByDestination splits off the events of a claimed batch whose
// destination is paused. A topic's first events can be claimed before a
// read of the pauses knows the topic routes to a paused destination;
// they are released unsent, their attempt refunded, and the topic joins
// the paused ones at once. An ordered key is in one topic, so all of its
// events in the batch go back together and its order is kept.
func (r *Relay) heldByDestination(batch []Envelope) (send, held []Envelope) {
	if r.cfg.DestinationOf == nil {
		return batch, nil
	}
	p := &r.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.dests) == 0 {
		return batch, nil
	}
	send = batch[:0:0]
	for _, env := range batch {
		if !p.dests[r.cfg.DestinationOf(env.Topic)] {
			send = append(send, env)
			continue
		}
		held = append(held, env)
		if !slices.Contains(p.topics, env.Topic) {
			p.topics = append(slices.Clone(p.topics), env.Topic)
			slices.Sort(p.topics)
			r.log.Info("topic paused: its events wait, unclaimed, until it is resumed", "topic", env.Topic)
		}
	}
	return send, held
}

// releaseHeld returns the held events of a claim to ready, unsent, their
// attempt refunded.
func (r *Relay) releaseHeld(ctx context.Context, token string, held []Envelope) error {
	p := CompleteParams{Token: token, Failed: make([]Failure, len(held))}
	for i, env := range held {
		p.Failed[i] = Failure{ID: env.ID, Outcome: OutcomeReleased}
	}
	ackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
	defer cancel()
	_, err := r.cfg.Store.Complete(ackCtx, p)
	return err
}

// logPauseChanges says, once, which topics a pause now holds and which it
// released.
func (r *Relay) logPauseChanges(before, after []string, loaded bool) {
	for _, t := range after {
		if !slices.Contains(before, t) {
			r.log.Info("topic paused: its events wait, unclaimed, until it is resumed", "topic", t)
		}
	}
	if !loaded {
		return
	}
	for _, t := range before {
		if !slices.Contains(after, t) {
			r.log.Info("topic resumed: its events are claimed again, in order", "topic", t)
		}
	}
}

// resumedAt returns when a pause that held topic last ended (its own or
// its destination's), the zero time if none did: RetryPolicy.MaxAge counts
// from then, so that time spent paused does not make an event dead.
func (r *Relay) resumedAt(topic string) time.Time {
	p := &r.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.resumed[topic]
	if r.cfg.DestinationOf != nil {
		if d, ok := p.destResume[r.cfg.DestinationOf(topic)]; ok && d.After(t) {
			t = d
		}
	}
	return t
}

// Paused returns the topics this relay leaves alone, as of its last read
// of the pauses (at most PauseRefresh old): topics an operator paused, and
// those it found routed to a paused destination.
func (r *Relay) Paused() []string {
	p := &r.pauses
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.topics)
}
