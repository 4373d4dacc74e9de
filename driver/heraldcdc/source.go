package heraldcdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/herald-outbox/herald"
)

// Source is a herald.Source: the relay's change-data-capture mode reads
// the outbox table's committed inserts in the streamed state from a
// Stream, in batches, and confirms a transaction's position once every
// batch that carried its events is done (a Tracker). It reconnects when
// the stream fails.
//
// One Source at a time reads a slot: PostgreSQL lets one walsender stream
// it, and that exclusivity is the fence between relays. A Source whose
// slot another reader streams stands by (Active is false): its Next waits,
// trying to take the slot every Config.StandbyInterval, and streams from
// the slot's confirmed position once the other reader released it (closed
// its stream, or its connection ended). A standby confirms nothing, since
// it reads nothing.
//
// Memory: a batch holds at most Next's limit of events, but the Stream
// reads whole transactions, and buffers up to Config.Buffer of them: a
// transaction of a million rows is held whole while its batches go out.
type Source struct {
	cfg Config // with defaults; CreateSlot only for the first Open

	mu      sync.Mutex
	stream  *Stream // the latest, kept once failed for its positions; nil before the first
	broken  bool    // no stream, or it failed and is closed: Next opens another
	standby bool    // another reader streams the slot: Next waits for it
	closed  bool
	quit    chan struct{} // closed by Close: ends open's waits

	// Next's own, never used concurrently.
	tracker *Tracker
	cur     *reading // the transaction partly handed out
}

var _ herald.Source = (*Source)(nil)

// reading is a transaction being handed out.
type reading struct {
	tx      Transaction
	txn     Txn
	ev, bad int // events and unreadable rows handed out so far
}

// Reconnection backoff: the first attempt at once, then from
// reconnectMin doubling to reconnectMax.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
)

var errSourceClosed = errors.New("heraldcdc: source closed")

// NewSource opens a Stream (see Open: it checks the slot, creating it
// only with Config.CreateSlot) and returns a Source reading it. A slot
// that another reader streams is no error: the Source stands by, and its
// Next waits until the slot is free. Every other refusal (no such slot, a
// slot that lost its WAL) is returned.
func NewSource(ctx context.Context, cfg Config) (*Source, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := Open(ctx, c)
	// A reconnection must find the slot: one made anew would skip what was
	// committed while the stream was down. (A slot in use exists.)
	reopen := c
	reopen.CreateSlot = false
	var inUse *SlotInUseError
	if errors.As(err, &inUse) {
		s := &Source{cfg: reopen, broken: true, quit: make(chan struct{})}
		s.standBy(inUse)
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	return &Source{cfg: reopen, stream: st, tracker: NewTracker(st.Start()), quit: make(chan struct{})}, nil
}

// Active reports whether the Source holds its slot: false while it stands
// by for another reader, while it reconnects, and once closed.
func (s *Source) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream != nil && !s.broken && !s.closed
}

// standBy records that another reader streams the slot, and says so once
// per wait.
func (s *Source) standBy(e *SlotInUseError) {
	s.mu.Lock()
	was := s.standby
	s.standby = true
	s.mu.Unlock()
	if was {
		return
	}
	who := "another relay"
	if e.PID != 0 {
		who += fmt.Sprintf(" (pid %d)", e.PID)
	}
	s.cfg.Logger.Info(fmt.Sprintf("standing by: slot %s is streamed by %s", s.cfg.Slot, who),
		"slot", s.cfg.Slot, "pid", e.PID, "retry_every", s.cfg.StandbyInterval.String())
}

// Next implements herald.Source. It waits for a transaction with at least
// one event or unreadable row (both count toward limit), then adds those
// already read without waiting, splitting a transaction that does not fit
// across batches. Transactions without any (only rows for the polling
// path) are confirmed once every earlier one is, and come in no batch.
//
// When the stream fails (the connection was lost, PostgreSQL restarted),
// Next logs it and opens another, from the slot's confirmed position,
// until ctx ends: the relay calls Next only after the previous batch's
// Done, so what was handed out is either confirmed or comes again. A
// refusal to open (the slot was dropped or lost its WAL) is returned; the
// next call tries again. While another reader streams the slot (the
// Source stands by), Next waits until it can take it, or ctx ends.
//
// A batch holds whole transactions, unless one alone is larger than
// limit: then it is split, and its batches hold nothing else. So a relay
// that stops after a batch's Done leaves no transaction partly published,
// which the next reader would deliver whole again. Next must not be
// called concurrently.
func (s *Source) Next(ctx context.Context, limit int) (herald.SourceBatch, error) {
	limit = max(limit, 1)
	b := &sourceBatch{logger: s.cfg.Logger}
	for b.size == 0 {
		st, err := s.open(ctx)
		if err != nil {
			return herald.SourceBatch{}, err
		}
		if s.cur == nil {
			tx, err := st.Next(ctx)
			if err != nil && ctx.Err() != nil {
				return herald.SourceBatch{}, context.Cause(ctx)
			}
			if err == nil {
				// Taken even if ctx ended meanwhile: it left the stream.
				err = s.take(st, tx)
			}
			if err != nil {
				if err := s.fail(st, err); err != nil {
					return herald.SourceBatch{}, err
				}
				continue
			}
		}
		b.stream, b.tracker = st, s.tracker
		for s.fill(b, limit) {
			tx, ok := st.poll()
			if !ok {
				break
			}
			if err := s.take(st, tx); err != nil {
				// The batch so far is good; the next call reconnects.
				_ = s.fail(st, err)
				break
			}
		}
	}
	return herald.SourceBatch{Events: b.events, Unreadable: b.unreadable, Done: b.done}, nil
}

// take adds a transaction read from st to the tracker, and makes it the
// one being handed out unless it has nothing to hand out.
func (s *Source) take(st *Stream, tx Transaction) error {
	txn, err := s.tracker.Add(tx.End, len(tx.Events)+len(tx.Unreadable))
	if err != nil {
		return err
	}
	if len(tx.Events)+len(tx.Unreadable) == 0 {
		// Confirm what it completes now (when every earlier transaction
		// is done; otherwise the batch's Done does): a run of transactions
		// of polled rows would else hold the slot back until the next
		// event, and heartbeats cannot pass a transaction handed out and
		// not confirmed.
		st.Confirm(s.tracker.Confirmed())
		return nil
	}
	s.cur = &reading{tx: tx, txn: txn}
	return nil
}

// fill moves what fits of the current transaction into b, and reports
// whether b has room for another. A transaction that b cannot take whole
// stays current, for the next batch, unless b is empty.
func (s *Source) fill(b *sourceBatch, limit int) bool {
	r := s.cur
	if r == nil {
		return b.size < limit
	}
	if b.size > 0 && r.ev+r.bad == 0 && len(r.tx.Events)+len(r.tx.Unreadable) > limit-b.size {
		return false
	}
	n := 0
	for r.ev < len(r.tx.Events) && b.size < limit {
		env := r.tx.Events[r.ev]
		env.Attempt, env.Ordered = 1, false // a first delivery; the relay orders
		b.events = append(b.events, env)
		r.ev++
		b.size++
		n++
	}
	for r.bad < len(r.tx.Unreadable) && b.size < limit {
		b.unreadable = append(b.unreadable, r.tx.Unreadable[r.bad])
		r.bad++
		b.size++
		n++
	}
	if n > 0 {
		b.parts = append(b.parts, part{txn: r.txn, n: n})
	}
	if r.ev == len(r.tx.Events) && r.bad == len(r.tx.Unreadable) {
		s.cur = nil
	}
	return b.size < limit
}

// open returns the stream, opening another if it failed or the Source
// stands by.
func (s *Source) open(ctx context.Context) (*Stream, error) {
	s.mu.Lock()
	st, broken, closed := s.stream, s.broken, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, errSourceClosed
	case !broken:
		return st, nil
	}
	wait := reconnectMin
	for {
		st, err := Open(ctx, s.cfg)
		if err == nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.closed {
				_ = st.Close()
				return nil, errSourceClosed
			}
			took := s.standby
			s.stream, s.broken, s.standby = st, false, false
			s.tracker, s.cur = NewTracker(st.Start()), nil
			if took {
				s.cfg.Logger.Info("took over slot "+s.cfg.Slot+": streaming", "slot", s.cfg.Slot, "from", st.Start().String())
			} else {
				s.cfg.Logger.Info("change stream reconnected", "slot", s.cfg.Slot, "from", st.Start().String())
			}
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		var (
			refused *refusal
			inUse   *SlotInUseError
		)
		switch {
		case errors.As(err, &refused):
			return nil, err
		case errors.As(err, &inUse):
			s.standBy(inUse)
			if err := s.pause(ctx, s.cfg.StandbyInterval); err != nil {
				return nil, err
			}
			wait = reconnectMin
			continue
		}
		s.cfg.Logger.Warn("change stream: reconnecting failed; retrying", "slot", s.cfg.Slot, "retry_in", wait.String(),
			"error", herald.Scrub(err.Error()))
		if err := s.pause(ctx, wait); err != nil {
			return nil, err
		}
		wait = min(2*wait, reconnectMax)
	}
}

// pause waits d, unless ctx ends or the Source is closed first.
func (s *Source) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-s.quit:
		return errSourceClosed
	case <-t.C:
		return nil
	}
}

// fail closes st after it failed with err, so that the next open makes
// another. Whatever was handed out of it and not confirmed comes again
// from the new one.
func (s *Source) fail(st *Stream, err error) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errSourceClosed
	}
	mine := s.stream == st && !s.broken
	if mine {
		s.broken = true
	}
	s.mu.Unlock()
	s.cur = nil
	if mine {
		s.cfg.Logger.Warn("change stream failed; reconnecting", "slot", s.cfg.Slot, "error", herald.Scrub(err.Error()))
		_ = st.Close()
	}
	return nil
}

// Close stops reading. Batches handed out and not done come again from
// the next Source on the slot.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.quit)
	st, broken := s.stream, s.broken
	s.mu.Unlock()
	if broken {
		return nil // closed when it failed, or never opened (standing by)
	}
	// Sends the position the last Done confirmed, then ends the walsender,
	// which releases the slot for a standby.
	return st.Close()
}

// Confirmed is the position last confirmed to the slot: Stream.Confirmed
// of the current stream; 0 before the Source first held the slot.
func (s *Source) Confirmed() pglogrepl.LSN {
	s.mu.Lock()
	st := s.stream
	s.mu.Unlock()
	if st == nil {
		return 0
	}
	return st.Confirmed()
}

// OldestUnconfirmed is Stream.OldestUnconfirmed of the current stream:
// the commit time of the oldest transaction read and not confirmed, for
// the slot's lag in time (heraldcdcprom). While the source reconnects it
// is the failed stream's; none before the Source first held the slot.
func (s *Source) OldestUnconfirmed() (time.Time, bool) {
	s.mu.Lock()
	st := s.stream
	s.mu.Unlock()
	if st == nil {
		return time.Time{}, false
	}
	return st.OldestUnconfirmed()
}

// sourceBatch is a batch being built, then handed out.
type sourceBatch struct {
	logger     *slog.Logger
	stream     *Stream // what was read from, and confirms it
	tracker    *Tracker
	parts      []part
	events     []herald.Envelope
	unreadable []herald.Failure
	size       int
	finished   atomic.Bool
}

// done acknowledges the batch's part of each transaction and confirms what
// that completes. A second call does nothing: acknowledging twice would
// confirm a later batch's events before they are done.
func (b *sourceBatch) done() {
	if b.finished.Swap(true) {
		return
	}
	for _, p := range b.parts {
		if err := b.tracker.Ack(p.txn, p.n); err != nil {
			b.logger.Error("change stream: acknowledging a batch", "error", err)
		}
	}
	b.stream.Confirm(b.tracker.Confirmed())
}

// part is how many events and unreadable rows of one transaction a batch
// carries.
type part struct {
	txn Txn
	n   int
}
