package heraldcdc

import (
	"fmt"
	"sync"

	"github.com/jackc/pglogrepl"
)

// Tracker decides which WAL position may be confirmed: the end of the
// latest transaction such that it and every transaction before it, in
// commit order, had all their events acknowledged. Acknowledgements may
// come back in any order and from several batches at once. It is safe for
// concurrent use.
type Tracker struct {
	mu        sync.Mutex
	pending   []*txnState // in commit order, oldest first; the fully acknowledged prefix is dropped
	confirmed pglogrepl.LSN
}

// txnState is one transaction's outstanding events.
type txnState struct {
	end  pglogrepl.LSN
	left int
}

// Txn is a transaction handed out by Add, for Ack.
type Txn struct{ s *txnState }

// NewTracker starts with from confirmed: where the slot stood.
func NewTracker(from pglogrepl.LSN) *Tracker { return &Tracker{confirmed: from} }

// Add records a committed transaction of n events ending at end (the
// commit record's end, CommitMessage.TransactionEndLSN). Transactions must
// be added in commit order; one without events is confirmed as soon as
// every earlier one is.
func (t *Tracker) Add(end pglogrepl.LSN, n int) (Txn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.confirmed
	if len(t.pending) > 0 {
		last = t.pending[len(t.pending)-1].end
	}
	if end <= last {
		return Txn{}, fmt.Errorf("heraldcdc: transaction ending at %s added after one ending at %s: not commit order", end, last)
	}
	if n < 0 {
		return Txn{}, fmt.Errorf("heraldcdc: transaction ending at %s has %d events", end, n)
	}
	s := &txnState{end: end, left: n}
	t.pending = append(t.pending, s)
	t.advance()
	return Txn{s}, nil
}

// Ack records that n more events of txn were acknowledged by every
// destination (published, or moved to the outbox table's retry and dead
// path).
func (t *Tracker) Ack(txn Txn, n int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if txn.s == nil || n < 0 || n > txn.s.left {
		return fmt.Errorf("heraldcdc: acknowledging %d events of a transaction with %d outstanding", n, txnLeft(txn))
	}
	txn.s.left -= n
	t.advance()
	return nil
}

func txnLeft(txn Txn) int {
	if txn.s == nil {
		return 0
	}
	return txn.s.left
}

// advance drops the fully acknowledged transactions at the head.
func (t *Tracker) advance() {
	i := 0
	for i < len(t.pending) && t.pending[i].left == 0 {
		t.confirmed = t.pending[i].end
		i++
	}
	if i > 0 {
		t.pending = append(t.pending[:0], t.pending[i:]...)
	}
}

// Confirmed is the position that may be sent to PostgreSQL as flushed.
func (t *Tracker) Confirmed() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed
}

// Pending counts the transactions not yet confirmed.
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
