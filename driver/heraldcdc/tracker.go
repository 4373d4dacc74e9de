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
//
// A transaction handed out in parts (Stream.Next) is learnt at its first
// part (Begin), grows by each part's events (Grow) and gets its end with
// its last part (Finish): it is confirmed only once its end is known and
// every event of every part is acknowledged, whichever comes last. Add
// does all three for a transaction read whole.
type Tracker struct {
	mu        sync.Mutex
	pending   []*txnState // in commit order, oldest first; the fully acknowledged prefix is dropped
	confirmed pglogrepl.LSN
}

// txnState is one transaction's outstanding events.
type txnState struct {
	end  pglogrepl.LSN // zero until Finish: more parts may come
	left int
}

// Txn is a transaction handed out by Add or Begin, for Grow, Finish and
// Ack.
type Txn struct{ s *txnState }

// NewTracker starts with from confirmed: where the slot stood.
func NewTracker(from pglogrepl.LSN) *Tracker { return &Tracker{confirmed: from} }

// Add records a whole committed transaction of n events ending at end (the
// commit record's end, CommitMessage.TransactionEndLSN). Transactions must
// be added in commit order; one without events is confirmed as soon as
// every earlier one is.
func (t *Tracker) Add(end pglogrepl.LSN, n int) (Txn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.beginnable(); err != nil {
		return Txn{}, err
	}
	if n < 0 {
		return Txn{}, fmt.Errorf("heraldcdc: transaction ending at %s has %d events", end, n)
	}
	if err := t.inOrder(end, len(t.pending)); err != nil {
		return Txn{}, err
	}
	s := &txnState{end: end, left: n}
	t.pending = append(t.pending, s)
	t.advance()
	return Txn{s}, nil
}

// Begin records a committed transaction whose first part is being handed
// out: no events yet (Grow), its end unknown (Finish). Nothing from it on
// is confirmed before it is finished.
func (t *Tracker) Begin() (Txn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.beginnable(); err != nil {
		return Txn{}, err
	}
	s := &txnState{}
	t.pending = append(t.pending, s)
	return Txn{s}, nil
}

// Grow adds n events, another part's, to a transaction that is not
// finished.
func (t *Tracker) Grow(txn Txn, n int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if txn.s == nil || txn.s.end != 0 || n < 0 {
		return fmt.Errorf("heraldcdc: adding %d events to a transaction that is finished or unknown", n)
	}
	txn.s.left += n
	return nil
}

// Finish records the end of a transaction from Begin, read with its last
// part: it is confirmed once every earlier one is and its events are all
// acknowledged, which may be at once.
func (t *Tracker) Finish(txn Txn, end pglogrepl.LSN) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Begin admits one unfinished transaction at a time, the latest.
	if txn.s == nil || txn.s.end != 0 || len(t.pending) == 0 || t.pending[len(t.pending)-1] != txn.s {
		return fmt.Errorf("heraldcdc: finishing at %s a transaction that is finished or unknown", end)
	}
	if err := t.inOrder(end, len(t.pending)-1); err != nil {
		return err
	}
	txn.s.end = end
	t.advance()
	return nil
}

// beginnable refuses a transaction while the latest one may still have
// parts to come: transactions are read one after the other.
func (t *Tracker) beginnable() error {
	if n := len(t.pending); n > 0 && t.pending[n-1].end == 0 {
		return fmt.Errorf("heraldcdc: a transaction added before the previous one's end was known: not commit order")
	}
	return nil
}

// inOrder refuses, for the transaction at index i of pending, an end
// that is not after the one before it (the confirmed position when none
// is pending before it).
func (t *Tracker) inOrder(end pglogrepl.LSN, i int) error {
	last := t.confirmed
	if i > 0 {
		last = t.pending[i-1].end
	}
	if end <= last {
		return fmt.Errorf("heraldcdc: transaction ending at %s added after one ending at %s: not commit order", end, last)
	}
	return nil
}

// Ack records that n more events of txn were acknowledged by every
// destination (published, or moved to the outbox table's retry and dead
// path). Only events added already (Add, Grow) can be acknowledged.
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

// advance drops the finished, fully acknowledged transactions at the head.
func (t *Tracker) advance() {
	i := 0
	for i < len(t.pending) && t.pending[i].end != 0 && t.pending[i].left == 0 {
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

// Pending counts the transactions not yet confirmed, a transaction whose
// parts are still coming included.
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
