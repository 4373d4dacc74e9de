package heraldpubsub

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/pubsub/v2"

	"github.com/herald-outbox/herald"
)

// sending is one Publish call's state.
type sending struct {
	p     *Publisher
	batch []herald.Envelope
	// answered counts the events the service answered for (a message ID,
	// or a refusal of the event or its topic), and those refused before
	// sending: with none, the batch failed as a whole.
	answered int
}

// outgoing is one message handed to the client.
type outgoing struct {
	i   int // position in the batch
	pub *pubsub.Publisher
	ref keyRef // its topic and ordering key ("" for none)
	res *pubsub.PublishResult
}

// round is the herald.RoundFunc of a Publish: it hands the round's messages
// to the client, waits for the answers, and sets each event's result.
func (s *sending) round(ctx context.Context, idx []int, errs []error) error {
	// refused maps an ordered key to the id of its event refused before
	// sending: the key's later events are held back, never handed over.
	refused := map[string]string{}
	out := make([]outgoing, 0, len(idx))
	for _, i := range idx {
		env := &s.batch[i]
		k := orderKey(env)
		if id, ok := refused[k]; ok {
			errs[i] = heldBack(env.ID, id)
			continue
		}
		msg, topicID, err := s.p.message(env)
		if err != nil {
			errs[i] = err
			s.answered++
			if k != "" {
				refused[k] = env.ID
			}
			continue
		}
		pub := s.p.topic(topicID)
		if pub == nil {
			errs[i] = ErrClosed
			continue
		}
		ref := keyRef{topic: topicID, key: msg.OrderingKey}
		s.p.keys.begin(ref)
		out = append(out, outgoing{i: i, pub: pub, ref: ref, res: pub.Publish(ctx, msg)})
	}
	wait(ctx, out)
	// failed maps an ordered key to the id of its first event that failed
	// in the client or the service, in batch order: the key's later events
	// are held back. (What follows a refused event was not handed over.)
	failed := map[string]string{}
	var abandoned []outgoing
	for _, o := range out {
		select {
		case <-o.res.Ready():
		default:
			// ctx ended first. The message may still be published: the
			// relay publishes it again. A later message of its key may
			// have been answered since: its own answer is reported.
			errs[o.i] = fmt.Errorf("heraldpubsub: event %s: no answer from Pub/Sub: %w", s.batch[o.i].ID, context.Cause(ctx))
			abandoned = append(abandoned, o)
			continue
		}
		msgID, err := o.res.Get(context.Background()) // ready: does not block
		s.p.keys.end(o.pub, o.ref, err != nil)
		errs[o.i] = s.outcome(&s.batch[o.i], o.ref.topic, msgID, err, failed)
	}
	s.p.settleLater(abandoned)
	return nil
}

// wait returns once every message of out is answered, or ctx ended.
func wait(ctx context.Context, out []outgoing) {
	for _, o := range out {
		select {
		case <-o.res.Ready():
		case <-ctx.Done():
			return
		}
	}
}

// outcome is the result of one answered event, in batch order, given the
// ordered keys that already failed.
func (s *sending) outcome(env *herald.Envelope, topicID, msgID string, err error, failed map[string]string) error {
	k := orderKey(env)
	if first, ok := failed[k]; ok {
		if err == nil {
			// The client pauses a key at its first failure, and Publish
			// resumes it only once nothing of the key is in flight: this
			// does not happen. Report what the service said.
			s.answered++
			s.p.log.Error("an event was published after an earlier event of its key failed",
				"event_id", env.ID, "failed_event_id", first, "topic", topicID)
			return nil
		}
		return heldBack(env.ID, first)
	}
	if err == nil && msgID == "" {
		err = errors.New("the service answered without a message ID")
	}
	if err == nil {
		s.answered++
		return nil
	}
	classified, answered := classify(env, s.p.project, topicID, err)
	if answered {
		s.answered++
	}
	if k != "" {
		failed[k] = env.ID
	}
	return classified
}

func heldBack(id, failedID string) error {
	return fmt.Errorf("heraldpubsub: event %s not published: event %s of its key failed first: %w", id, failedID, herald.ErrHeldBack)
}

// orderKey names the ordered key of env within its topic, "" when the
// relay does not order env.
func orderKey(env *herald.Envelope) string {
	if !env.Ordered || env.Key == "" {
		return ""
	}
	return env.Topic + "\x00" + env.Key
}

// settleLater waits, in a goroutine, for the answers of messages a Publish
// stopped waiting for, so that their keys are resumed once nothing of them
// is in flight.
func (p *Publisher) settleLater(out []outgoing) {
	if len(out) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		// Nothing is published through p again: no key needs resuming.
		// (Adding to settling now could race with Close's Wait.)
		return
	}
	p.settling.Add(1)
	go func() {
		defer p.settling.Done()
		// Every result is answered: by the service, by the client's
		// Timeout, or by Stop in Close.
		for _, o := range out {
			<-o.res.Ready()
			_, err := o.res.Get(context.Background())
			p.keys.end(o.pub, o.ref, err != nil)
		}
	}()
}
