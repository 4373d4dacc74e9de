package bench

import (
	"context"
	"sync"

	"github.com/herald-outbox/herald"
)

// Recording is a drain destination for tests, "record": it counts how
// many times each event id arrived, one map per drain, and keeps what
// arrived in the order the publishes returned.
type Recording struct {
	mu       sync.Mutex
	drains   []map[string]int
	arrivals [][]Arrival
}

// Arrival is one event the record destination took.
type Arrival struct{ Key, AggregateID string }

// Arrivals returns a copy of each drain's arrivals, in the order the
// drains ran.
func (r *Recording) Arrivals() [][]Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][]Arrival, len(r.arrivals))
	for i, a := range r.arrivals {
		out[i] = append([]Arrival(nil), a...)
	}
	return out
}

// KeyOrderOf runs the drain's order check over arrivals.
func KeyOrderOf(arrivals []Arrival) KeyOrder {
	var c keyOrderCheck
	for _, a := range arrivals {
		c.add(a.Key, a.AggregateID)
	}
	return c.KeyOrder
}

// Drains returns a copy of each drain's counts, in the order they ran.
func (r *Recording) Drains() []map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]map[string]int, len(r.drains))
	for i, d := range r.drains {
		out[i] = make(map[string]int, len(d))
		for id, n := range d {
			out[i][id] = n
		}
	}
	return out
}

// AddRecordingSink makes "record" a destination of --to until remove is
// called. Tests that use it do not run in parallel with others of this
// package.
func AddRecordingSink() (rec *Recording, remove func()) {
	rec = &Recording{}
	saved := drainSinks
	drainSinks = append(drainSinks[:len(drainSinks):len(drainSinks)], drainSink{
		name: "record", note: "a publisher that counts each event id",
		open: func(context.Context, *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
			counts := map[string]int{}
			rec.mu.Lock()
			rec.drains = append(rec.drains, counts)
			rec.arrivals = append(rec.arrivals, nil)
			drain := len(rec.arrivals) - 1
			rec.mu.Unlock()
			// The batch is recorded whole under the lock: a key's
			// events are never in two batches in flight at once, so
			// the order of the records per key is the order the
			// publishes confirmed them.
			pub := herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				for _, env := range batch {
					counts[env.ID]++
					rec.arrivals[drain] = append(rec.arrivals[drain], Arrival{Key: env.Key, AggregateID: env.AggregateID})
				}
				return nil
			})
			return pub, nil, func() {}, nil
		},
	})
	return rec, func() { drainSinks = saved }
}
