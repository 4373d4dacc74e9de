package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald/publish/heraldnats"
)

// KeyOrder is what a read of a destination, in the order it holds the
// messages, found about each key's events. The backlog is loaded in one
// transaction, each event's aggregate id its position in it, so a key's
// events must arrive with their aggregate ids rising.
type KeyOrder struct {
	Messages int64 `json:"messages"` // read back
	Keys     int   `json:"keys"`     // distinct keys among them
	// OutOfOrder counts messages that arrived after a later event of
	// their key.
	OutOfOrder int64 `json:"out_of_order"`
	// Repeated counts messages of the event just before them in their
	// key: a duplicate.
	Repeated int64 `json:"repeated"`
	// Unreadable counts messages whose aggregate id is not a position.
	Unreadable int64 `json:"unreadable"`
}

// Problems says what is wrong with o, nothing when every key's events
// came once each, in order.
func (o *KeyOrder) Problems() []string {
	var out []string
	if o.OutOfOrder > 0 {
		out = append(out, fmt.Sprintf("%d messages came after a later event of their key", o.OutOfOrder))
	}
	if o.Repeated > 0 {
		out = append(out, fmt.Sprintf("%d messages repeat the event before them in their key", o.Repeated))
	}
	if o.Unreadable > 0 {
		out = append(out, fmt.Sprintf("%d messages have no readable position", o.Unreadable))
	}
	return out
}

// keyOrderCheck reads messages one by one in the destination's order.
type keyOrderCheck struct {
	KeyOrder
	last map[string]int64 // each key's last position
}

// add takes the next message: its key and its aggregate id.
func (c *keyOrderCheck) add(key, aggregateID string) {
	c.Messages++
	pos, err := strconv.ParseInt(aggregateID, 10, 64)
	if err != nil {
		c.Unreadable++
		return
	}
	if c.last == nil {
		c.last = map[string]int64{}
	}
	last, seen := c.last[key]
	switch {
	case !seen:
		c.Keys++
	case pos == last:
		c.Repeated++
		return
	case pos < last:
		c.OutOfOrder++
		return
	}
	c.last[key] = pos
}

// jetStreamKeyOrder reads the drain's stream from its first message to
// its last, in stream order, through an ordered consumer.
func jetStreamKeyOrder(ctx context.Context, e *env) (*KeyOrder, error) {
	st, err := e.nats.js.Stream(ctx, drainStream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	want := int64(info.State.Msgs)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", drainStream, err)
	}
	var c keyOrderCheck
	for c.Messages < want {
		batch, err := cons.Fetch(int(min(1000, want-c.Messages)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", drainStream, err)
		}
		before := c.Messages
		for m := range batch.Messages() {
			msg, err := heraldnats.ParseJetStream(m)
			if err != nil {
				c.Messages++
				c.Unreadable++
				continue
			}
			c.add(msg.Key, msg.AggregateID)
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", drainStream, err)
		}
		if c.Messages == before {
			return nil, fmt.Errorf("reading stream %s: nothing after %d of %d messages", drainStream, before, want)
		}
	}
	return &c.KeyOrder, nil
}
