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
// Memory is bounded in bytes, whatever the size of a transaction: the
// Stream reads transactions in parts and queues at most
// Config.BufferBytes of them, and the Source holds, besides the batch it
// hands out, at most one batch's rows and one part, so a transaction of a
// million rows goes out in batches as its parts arrive and is never held
// whole.
type Source struct {
	cfg Config // with defaults; CreateSlot only for the first Open

	mu      sync.Mutex
	stream  *Stream // the latest, kept once failed for its positions; nil before the first
	broken  bool    // no stream, or it failed and is closed: Next opens another
	standby bool    // another reader streams the slot: Next waits for it
	closed  bool
	quit    chan struct{} // closed by Close: ends open's waits
	skipped int64         // SkippedMessages of the streams before s.stream

	// Next's own, never used concurrently.
	tracker  *Tracker
	held     []piece // parts read whose rows are not all handed out, oldest first
	heldRows int     // their rows not handed out
	heldSize int     // their parts' sizes (Transaction.size), whole until a part is all handed out
	reading  Txn     // the transaction whose last part is still to come, if any
}

var _ herald.Source = (*Source)(nil)

// piece is a part read from the stream whose rows are being handed out.
type piece struct {
	tx      Transaction // Polled dropped: nothing of the Source's
	txn     Txn
	ev, bad int  // events and unreadable rows handed out so far
	left    int  // what the rows not handed out hold in memory (rowBytes), kept as they go
	last    bool // no rows of its transaction follow (its last part was read)
}

// rows counts the rows of p not handed out yet.
func (p *piece) rows() int { return len(p.tx.Events) - p.ev + len(p.tx.Unreadable) - p.bad }

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
// A batch holds whole transactions, at most limit rows and
// Config.BufferBytes of memory (a row larger than that goes out alone),
// unless one alone is larger than that: then it is split, and goes out in
// batches as its parts arrive. With the stream's own buffer, the Source
// holds at most about twice BufferBytes of events, whatever limit is.
// So a relay that stops after a batch's Done leaves no transaction
// partly published, which the next reader would deliver whole again,
// unless it is larger than a batch. Which rows go out is cut's decision.
// Next must not be called concurrently.
func (s *Source) Next(ctx context.Context, limit int) (herald.SourceBatch, error) {
	limit = max(limit, 1)
	for {
		st, err := s.open(ctx)
		if err != nil {
			return herald.SourceBatch{}, err
		}
		// Parts read already, while fewer rows than a batch are held: cut
		// would ask for each (it decides only once limit rows are held or
		// nothing more is read), and deciding once spares recounting the
		// held transactions after every part.
		for s.heldRows < limit && s.heldSize < s.cfg.BufferBytes && err == nil {
			part, ok := st.poll()
			if !ok {
				break
			}
			err = s.take(st, part)
		}
		if err == nil {
			spans := s.spans()
			fit := 0 // rows of the first transaction within BufferBytes, counted only when it reaches them
			if len(spans) > 0 {
				fit = spans[0].rows
				if spans[0].bytes >= s.cfg.BufferBytes {
					fit = s.fit(s.cfg.BufferBytes)
				}
			}
			n, more := cut(spans, limit, s.cfg.BufferBytes, fit)
			if !more {
				return s.hand(st, n), nil
			}
			// Another part could change the batch: take one read already,
			// or wait for one when there is nothing to hand out yet.
			part, ok := st.poll()
			if !ok && n > 0 {
				return s.hand(st, n), nil
			}
			if !ok {
				part, err = st.Next(ctx)
				if err != nil && ctx.Err() != nil {
					return herald.SourceBatch{}, context.Cause(ctx)
				}
			}
			if err == nil {
				// Taken even if ctx ended meanwhile: it left the stream.
				err = s.take(st, part)
			}
		}
		if err != nil {
			if err := s.fail(st, err); err != nil {
				return herald.SourceBatch{}, err
			}
		}
	}
}

// take records a part read from st in the tracker and holds its rows
// for the batches to come.
func (s *Source) take(st *Stream, part Transaction) error {
	if (part.Part == 0) != (s.reading.s == nil) {
		return fmt.Errorf("heraldcdc: part %d of the transaction committed at %s out of turn", part.Part, part.Commit)
	}
	if part.Part == 0 {
		txn, err := s.tracker.Begin()
		if err != nil {
			return err
		}
		s.reading = txn
	}
	txn, rows := s.reading, len(part.Events)+len(part.Unreadable)
	if err := s.tracker.Grow(txn, rows); err != nil {
		return err
	}
	last := part.End != 0
	part.Polled = nil
	switch {
	case rows > 0:
		p := piece{tx: part, txn: txn, last: last}
		p.left = p.bytes(rows)
		s.held = append(s.held, p)
		s.heldRows += rows
		s.heldSize += part.size
	case last && len(s.held) > 0 && s.held[len(s.held)-1].txn == txn:
		s.held[len(s.held)-1].last = true
	}
	if !last {
		return nil
	}
	s.reading = Txn{}
	if err := s.tracker.Finish(txn, part.End); err != nil {
		return err
	}
	// Confirm what finishing completes now (a transaction of polled rows
	// only, or one whose events were all acknowledged before its end
	// came, when every earlier one is done; otherwise a batch's Done
	// does): a run of transactions of polled rows would else hold the
	// slot back until the next event, and heartbeats cannot pass a
	// transaction handed out and not confirmed.
	st.Confirm(s.tracker.Confirmed())
	return nil
}

// span is one transaction's rows held by the Source, for cut: how many
// are not handed out yet and what they hold in memory (envelopeSize),
// and whether its last part was read (no more rows come).
type span struct {
	rows, bytes int
	last        bool
}

// spans sums up what the Source holds, by transaction, oldest first.
func (s *Source) spans() []span {
	var out []span
	for i := range s.held {
		p := &s.held[i]
		if i == 0 || p.txn != s.held[i-1].txn {
			out = append(out, span{})
		}
		out[len(out)-1].rows += p.rows()
		out[len(out)-1].bytes += p.left
		out[len(out)-1].last = p.last
	}
	return out
}

// bytes is what the next n rows of p not handed out hold in memory.
func (p *piece) bytes(n int) int {
	b := 0
	for k := range min(n, p.rows()) {
		b += p.rowBytes(k)
	}
	return b
}

// rowBytes is what p's k-th row not handed out holds in memory: its
// events come first, then its unreadable rows.
func (p *piece) rowBytes(k int) int {
	if i := p.ev + k; i < len(p.tx.Events) {
		return envelopeSize(&p.tx.Events[i])
	}
	f := &p.tx.Unreadable[p.bad+k-(len(p.tx.Events)-p.ev)]
	return failureOverhead + len(f.ID) + len(f.Error)
}

// fit counts the rows of the first transaction held, from the first not
// handed out, that hold at most maxBytes together; at least one, when
// any is held, so that a row larger than maxBytes still goes out alone.
func (s *Source) fit(maxBytes int) int {
	n, b := 0, 0
	for i := range s.held {
		p := &s.held[i]
		if p.txn != s.held[0].txn {
			break
		}
		for k := range p.rows() {
			b += p.rowBytes(k)
			if b > maxBytes && n > 0 {
				return n
			}
			n++
		}
	}
	return n
}

// cut decides the next batch from the transactions held, oldest first:
// hand out their first n rows, unless more is true, when another part
// read could change that (then n is what goes out if none is read yet,
// and with n zero Next waits for one).
//
// The rule: a batch holds whole transactions, as many as fit in limit
// rows and maxBytes of memory, unless the first alone holds limit rows
// or maxBytes or more: then it holds as many rows of it as fit in both
// (fit is how many of its rows fit in maxBytes, at least one), and the
// rest goes out later. So the first transaction is waited for until its
// last part, limit rows or maxBytes of it are read; a later one joins the
// batch only if its last part is read already and it fits. Next reads a
// part only while that could change the batch, so the Source holds at
// most limit rows or maxBytes, and one part.
func cut(txs []span, limit, maxBytes, fit int) (n int, more bool) {
	if len(txs) == 0 {
		return 0, true
	}
	if txs[0].rows >= limit || txs[0].bytes >= maxBytes {
		return min(limit, fit, txs[0].rows), false
	}
	if !txs[0].last {
		return 0, true
	}
	n, b := txs[0].rows, txs[0].bytes
	for _, t := range txs[1:] {
		if n+t.rows > limit || b+t.bytes > maxBytes {
			return n, false
		}
		if !t.last {
			return n, true
		}
		n, b = n+t.rows, b+t.bytes
	}
	return n, n < limit && b < maxBytes
}

// hand makes a batch of the first n rows held, in order.
func (s *Source) hand(st *Stream, n int) herald.SourceBatch {
	b := &sourceBatch{logger: s.cfg.Logger, stream: st, tracker: s.tracker}
	var out herald.SourceBatch
	for n > 0 {
		p := &s.held[0]
		k := 0
		for ; p.ev < len(p.tx.Events) && k < n; p.ev++ {
			p.left -= p.rowBytes(0)
			env := p.tx.Events[p.ev]
			// Not kept here: the payload is freed with the batch.
			p.tx.Events[p.ev] = herald.Envelope{}
			env.Attempt, env.Ordered = 1, false // a first delivery; the relay orders
			out.Events = append(out.Events, env)
			k++
		}
		for ; p.bad < len(p.tx.Unreadable) && k < n; p.bad++ {
			p.left -= p.rowBytes(0)
			out.Unreadable = append(out.Unreadable, p.tx.Unreadable[p.bad])
			k++
		}
		if m := len(b.parts); m > 0 && b.parts[m-1].txn == p.txn {
			b.parts[m-1].n += k
		} else {
			b.parts = append(b.parts, part{txn: p.txn, n: k})
		}
		n -= k
		s.heldRows -= k
		if p.rows() == 0 {
			s.heldSize -= p.tx.size
			s.held[0] = piece{}
			s.held = s.held[1:]
		}
	}
	out.Done = b.done
	out.Abandon = func() {
		if !b.finished.Swap(true) {
			// Next's state is touched on the relay's goroutine, which
			// calls Next too, never at once.
			_ = s.fail(st, errAbandoned)
		}
	}
	return out
}

// errAbandoned is why the stream is closed when the relay gives up a batch.
var errAbandoned = errors.New("heraldcdc: the relay gave a batch up unsettled (its database does not answer)")

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
			if s.stream != nil {
				s.skipped += s.stream.SkippedMessages()
			}
			s.stream, s.broken, s.standby = st, false, false
			s.tracker, s.held, s.heldRows, s.heldSize, s.reading = NewTracker(st.Start()), nil, 0, 0, Txn{}
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
	s.held, s.heldRows, s.heldSize, s.reading = nil, 0, 0, Txn{}
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

// SkippedMessages counts the logical decoding messages of the outbox's
// event prefix that the Source's streams skipped as no event (not
// transactional, or without an id or a topic), each logged as an error:
// they leave no dead letter. It goes on counting across reconnections.
func (s *Source) SkippedMessages() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.skipped
	if s.stream != nil {
		n += s.stream.SkippedMessages()
	}
	return n
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

// sourceBatch is what a batch's Done needs: not its events, which the
// relay lets go of while Done is kept.
type sourceBatch struct {
	logger   *slog.Logger
	stream   *Stream // what was read from, and confirms it
	tracker  *Tracker
	parts    []part
	finished atomic.Bool
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
