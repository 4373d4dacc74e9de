package heraldnats

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
)

// pendingBytes bounds the bytes of the messages awaiting a PubAck
// (Config.MaxPendingBytes). The client's own bound, MaxPending, counts
// messages only: 4096 messages of 1 MB would be 4 GB on their way to a
// stream whose intake queue holds 128 MiB, and every message past the
// queue's limit would come back refused (429).
//
// A message holds its bytes from before it is sent until the client
// resolves its PubAck future (an ack, an error, the ack timeout, a
// reconnect), even when the Publish that sent it stopped waiting: until
// then it may still sit in the broker's intake queue.
type pendingBytes struct {
	max int

	mu   sync.Mutex
	used int
	held map[*nats.Msg]int
	// freed is closed when bytes are released; nil while nobody waits.
	freed chan struct{}
}

func newPendingBytes(maxBytes int) *pendingBytes {
	return &pendingBytes{max: maxBytes, held: map[*nats.Msg]int{}}
}

// acquire waits until m's n bytes fit under the bound, then holds them for
// m. A message larger than the bound goes alone, once nothing else is
// pending, rather than never. It fails only when ctx ends.
func (p *pendingBytes) acquire(ctx context.Context, m *nats.Msg, n int) error {
	for {
		p.mu.Lock()
		if p.used == 0 || p.used+n <= p.max {
			p.used += n
			p.held[m] = n
			p.mu.Unlock()
			return nil
		}
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release frees the bytes m holds. It is safe to call more than once, and
// for a message that holds none: the client calls it for every resolved
// future, and Publish for a message the client refused to send.
func (p *pendingBytes) release(m *nats.Msg) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.held[m]
	if !ok {
		return
	}
	delete(p.held, m)
	p.used -= n
	if p.freed != nil {
		close(p.freed)
		p.freed = nil
	}
}

// inUse returns the bytes held now, for tests.
func (p *pendingBytes) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used
}
