package heraldkafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
)

// Transactional makes Publish exactly once into Kafka for consumers that
// read with isolation.level=read_committed: each batch is produced in a
// Kafka transaction that also writes a marker record naming the batch's
// events, and an event that a previous claim may already have published
// (herald.Envelope.Attempt above 1) is looked up in the markers first and
// not produced again when a committed marker names it. See the package
// documentation, "Exactly once".
type Transactional struct {
	// ID is the transactional id of this relay's slot; its n concurrent
	// transactions use ID-0 ... ID-(n-1). A relay restarted with the same
	// ID fences the transactions its previous process left open: give
	// each relay a stable ID of its own (two live relays with the same ID
	// fence each other's transactions, which then fail and are retried).
	// Defaults to "herald-" and the host name; a destination opened from
	// a kafka:// URL adds "-" and the destination's name.
	ID string
	// Clients is how many transactions run at once, each on its own
	// client: a transactional client runs one transaction at a time.
	// Defaults to 4.
	Clients int
	// MarkerTopic is the topic of the markers, created (one partition,
	// cleanup.policy=delete, retention.ms=RetentionMs below) when missing.
	// Config.TopicPrefix does not apply to it. Defaults to
	// "__herald_published".
	MarkerTopic string
	// Timeout is the Kafka transaction timeout: the coordinator aborts a
	// transaction open longer than that (a relay killed before its
	// commit), and until then read_committed consumers, and the marker
	// look-ups of other relays, wait behind it. It must not exceed the
	// brokers' transaction.max.timeout.ms. Defaults to 30s.
	Timeout time.Duration
	// Lookback is how far before an event's CreatedAt the marker look-up
	// starts, to allow for the database's clock being ahead of the
	// relays'. Defaults to 5m.
	Lookback time.Duration
}

// Defaults of Transactional.
const (
	DefaultMarkerTopic = "__herald_published"
	defaultTxClients   = 4
	defaultTxTimeout   = 30 * time.Second
	defaultTxLookback  = 5 * time.Minute
	// markerRetention is the marker topic's retention.ms when Herald
	// creates it: an event rescued after its marker expired is published
	// again.
	markerRetention = 7 * 24 * time.Hour
)

// withDefaults returns t with its defaults filled in, or the field that is
// wrong.
func (t Transactional) withDefaults() (Transactional, error) {
	if t.ID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return t, errors.New("heraldkafka: Config.Transactional.ID is empty and the host name is unknown: set it")
		}
		t.ID = "herald-" + host
	}
	if t.Clients == 0 {
		t.Clients = defaultTxClients
	}
	if t.MarkerTopic == "" {
		t.MarkerTopic = DefaultMarkerTopic
	}
	if t.Timeout == 0 {
		t.Timeout = defaultTxTimeout
	}
	if t.Lookback == 0 {
		t.Lookback = defaultTxLookback
	}
	switch {
	case len(t.ID) > 200:
		return t, errors.New("heraldkafka: Config.Transactional.ID is longer than 200 bytes")
	case t.Clients < 0 || t.Clients > 64:
		return t, errors.New("heraldkafka: Config.Transactional.Clients must be between 1 and 64")
	case t.Timeout < time.Second:
		return t, errors.New("heraldkafka: Config.Transactional.Timeout must be at least 1s")
	case t.Lookback < 0:
		return t, errors.New("heraldkafka: Config.Transactional.Lookback must not be negative")
	}
	if reason := checkTopic(t.MarkerTopic); reason != "" {
		return t, fmt.Errorf("heraldkafka: Config.Transactional.MarkerTopic %q %s", t.MarkerTopic, reason)
	}
	return t, nil
}

// txPool holds the transactional clients of a Publisher, one transaction
// at a time each.
type txPool struct {
	cfg   Transactional
	base  []kgo.Opt // the user's client's options
	slots chan *txSlot

	mu      sync.Mutex
	closed  bool
	created bool // the marker topic exists
	// unsure are the events of commits that failed and that the marker
	// topic could not settle then: looked up before they are sent again,
	// whatever their attempt (the relay may have given it back).
	unsure map[string]bool
}

// maxUnsure bounds txPool.unsure; past it, the oldest entries are not
// kept apart (a map has no order: any are dropped).
const maxUnsure = 100_000

func (p *txPool) isUnsure(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unsure[id]
}

func (p *txPool) addUnsure(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unsure == nil {
		p.unsure = map[string]bool{}
	}
	for _, id := range ids {
		if len(p.unsure) >= maxUnsure {
			for old := range p.unsure {
				delete(p.unsure, old)
				break
			}
		}
		p.unsure[id] = true
	}
}

// resolved forgets ids, looked up.
func (p *txPool) resolved(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		delete(p.unsure, id)
	}
}

// txSlot is one transactional id and its client, made on first use and
// made again after an error that leaves it unusable.
type txSlot struct {
	id string
	cl *kgo.Client
}

func newTxPool(base *kgo.Client, cfg Transactional) *txPool {
	p := &txPool{cfg: cfg, base: base.Opts(), slots: make(chan *txSlot, cfg.Clients)}
	for i := range cfg.Clients {
		p.slots <- &txSlot{id: cfg.ID + "-" + strconv.Itoa(i)}
	}
	return p
}

// acquire takes a free slot, waiting for one until ctx ends.
func (p *txPool) acquire(ctx context.Context) (*txSlot, error) {
	select {
	case s := <-p.slots:
		return s, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("heraldkafka: waiting for a free transaction: %w", context.Cause(ctx))
	}
}

func (p *txPool) release(s *txSlot) { p.slots <- s }

// client returns s's client, making it when s has none.
func (p *txPool) client(s *txSlot) (*kgo.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("heraldkafka: publisher closed: %w", kgo.ErrClientClosed)
	}
	if s.cl != nil {
		return s.cl, nil
	}
	opts := append(append([]kgo.Opt{}, p.base...), kgo.TransactionalID(s.id), kgo.TransactionTimeout(p.cfg.Timeout))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("heraldkafka: making the transactional client %q: %w", s.id, err)
	}
	s.cl = cl
	return cl, nil
}

// reset drops s's client: the next transaction makes a new one, whose
// producer id request aborts whatever this one left open.
func (p *txPool) reset(s *txSlot) {
	p.mu.Lock()
	cl := s.cl
	s.cl = nil
	p.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}

// close closes every client, waiting for the transactions under way.
func (p *txPool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	for range cap(p.slots) {
		s := <-p.slots
		if s.cl != nil {
			s.cl.Close()
		}
	}
}

// Close closes the transactional clients of a publisher made with
// Config.Transactional, after the transactions under way end; the client
// given to New stays open. It is safe to call more than once, and does
// nothing for a publisher without transactions.
func (p *Publisher) Close() {
	if p.tx != nil {
		p.tx.close()
	}
}

// publishTx publishes batch in one Kafka transaction (see the package
// documentation, "Exactly once").
func (p *Publisher) publishTx(ctx context.Context, batch []herald.Envelope) error {
	slot, err := p.tx.acquire(ctx)
	if err != nil {
		return err
	}
	defer p.tx.release(slot)
	if err := p.ensureMarkerTopic(ctx); err != nil {
		return err
	}
	done, err := p.alreadyPublished(ctx, batch)
	if err != nil {
		return err
	}
	errs := make([]error, len(batch))
	send, recs := p.plan(batch, done, errs)
	if len(send) == 0 {
		return herald.BatchResult(errs)
	}
	cl, err := p.tx.client(slot)
	if err != nil {
		return err
	}
	ids := make([]string, len(send))
	for j, i := range send {
		ids[j] = batch[i].ID
	}
	if err := p.transact(ctx, slot, cl, ids, send, recs, errs); err != nil {
		return err
	}
	if err := herald.BatchResult(errs); err != nil {
		return err
	}
	p.log.Debug("published batch in a transaction", "batch_size", len(batch), "already_published", len(done), "transactional_id", slot.id)
	return nil
}

// plan builds the records of the events of batch still to send, in batch
// order: not in done (already in Kafka: their error stays nil), not
// refused here (a permanent error), not behind a refused event of their
// ordered key (held back). It returns their indexes and records.
func (p *Publisher) plan(batch []herald.Envelope, done map[string]bool, errs []error) ([]int, []*kgo.Record) {
	var (
		send    []int
		recs    []*kgo.Record
		refused map[herald.TopicKey]bool
	)
	for i := range batch {
		env := &batch[i]
		if done[env.ID] {
			continue
		}
		k := herald.TopicKey{Topic: env.Topic, Key: env.Key}
		ordered := env.Ordered && env.Key != ""
		if ordered && refused[k] {
			errs[i] = fmt.Errorf("heraldkafka: event %s follows a refused event of its key: %w", env.ID, herald.ErrHeldBack)
			continue
		}
		rec, err := p.record(env)
		if err == nil && p.isMarkerTopic(rec.Topic) {
			err = herald.Permanent(fmt.Errorf("heraldkafka: topic %q is the marker topic of Herald's transactions", rec.Topic))
		}
		if err != nil {
			errs[i] = err
			if ordered {
				if refused == nil {
					refused = map[herald.TopicKey]bool{}
				}
				refused[k] = true
			}
			continue
		}
		send, recs = append(send, i), append(recs, rec)
	}
	return send, recs
}

// transact produces the marker naming ids and recs (the records of
// batch[send[j]]) in one transaction and commits it, setting errs[send[j]].
// All of them are committed or none: a record that fails aborts the
// transaction. It returns a plain error, for the relay to take as an
// outage, when no broker answered and the transaction was surely not
// committed.
//
// The records of a transaction are produced at once, not in rounds: the
// client keeps each partition's records in order, and a record failing
// aborts every record of the transaction, so no event can reach a
// read_committed consumer after an earlier one of its key failed.
func (p *Publisher) transact(ctx context.Context, slot *txSlot, cl *kgo.Client, ids []string, send []int, recs []*kgo.Record, errs []error) error {
	begun := time.Now()
	if err := cl.BeginTransaction(); err != nil {
		p.tx.reset(slot)
		return fmt.Errorf("heraldkafka: beginning a transaction: %w", err)
	}
	if hook := p.hook; hook != nil {
		hook("begun")
	}
	marker := &kgo.Record{Topic: p.tx.cfg.MarkerTopic, Key: []byte(slot.id), Value: encodeMarker(ids)}
	all := append([]*kgo.Record{marker}, recs...)
	results := make([]error, len(all))
	answered, pending := p.produceAll(ctx, cl, all, results)
	var failed error // why the transaction cannot commit
	switch {
	case pending:
		failed = unconfirmed(ctx)
	case ctx.Err() != nil:
		// The lease ends with ctx: past it, another relay may rescue the
		// batch, so this transaction must not commit.
		failed = unconfirmed(ctx)
	default:
		failed = firstError(results)
	}
	if failed != nil {
		return p.abort(slot, cl, send, recs, results[1:], failed, answered, errs)
	}
	if hook := p.hook; hook != nil {
		hook("produced")
	}
	// Not ctx: a commit cut short leaves its outcome unknown. The
	// transaction timeout bounds it all the same.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.tx.cfg.Timeout)
	err := cl.EndTransaction(cctx, kgo.TryCommit)
	cancel()
	if err != nil {
		return p.settle(ctx, slot, cl, ids, send, begun, err, errs)
	}
	if hook := p.hook; hook != nil {
		hook("committed")
	}
	return nil
}

// settle finds out whether a commit that failed (commitErr) landed, and
// sets errs. Aborting first fences the transaction: from then on, it is
// committed or aborted for good, and its marker says which. Landed, the
// events are published; not landed, they failed and are retried. When the
// marker topic cannot tell, the events spend an attempt and this process
// looks them up before it sends them again.
//
// Why not leave every such commit to the next attempt's look-up: the relay
// gives back the attempt of the events it holds back behind a failed event
// of their key, so those would be sent again without a look-up.
func (p *Publisher) settle(ctx context.Context, slot *txSlot, cl *kgo.Client, ids []string, send []int, begun time.Time, commitErr error, errs []error) error {
	p.endAborting(slot, cl)
	// Not cut short by the relay stopping: what it would leave unsettled
	// this process could not look up later.
	landed, err := p.lookUp(context.WithoutCancel(ctx), ids, begun.Add(-p.tx.cfg.Lookback))
	switch {
	case err == nil && len(landed) > 0:
		// One marker names them all: all landed.
		p.log.Info("transaction commit unconfirmed, then found committed", "transactional_id", slot.id, "events", len(send))
		return nil
	case err == nil:
		for _, i := range send {
			errs[i] = fmt.Errorf("heraldkafka: transaction %s not committed: %w", slot.id, commitErr)
		}
		return nil
	}
	p.tx.addUnsure(ids)
	for _, i := range send {
		// Neither an outage nor a timeout: the attempt counts.
		errs[i] = fmt.Errorf("heraldkafka: transaction %s: commit unconfirmed (%s), and the look-up failed: %s",
			slot.id, commitErr.Error(), err.Error())
	}
	p.log.Warn("transaction commit unconfirmed; its events are looked up before they are sent again",
		"transactional_id", slot.id, "events", len(send), "error", commitErr.Error())
	return nil
}

// produceAll hands recs to cl at once and waits for their results in
// results until ctx ends. It reports whether a broker answered any, and
// whether some are still unanswered.
func (p *Publisher) produceAll(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, results []error) (answered, pending bool) {
	type result struct {
		j   int
		err error
	}
	ch := make(chan result, len(recs))
	for j, rec := range recs {
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { ch <- result{j, err} })
	}
	for waiting := len(recs); waiting > 0; waiting-- {
		select {
		case r := <-ch:
			results[r.j] = r.err
			var kafkaErr *kerr.Error
			if r.err == nil || errors.As(r.err, &kafkaErr) {
				answered = true
			}
		case <-ctx.Done():
			return answered, true
		}
	}
	return answered, false
}

// abort ends the transaction without committing it and sets errs: each
// record's own error, or why the transaction failed. A plain error is
// returned when no broker answered, an outage.
func (p *Publisher) abort(slot *txSlot, cl *kgo.Client, send []int, recs []*kgo.Record, results []error, why error, answered bool, errs []error) error {
	p.endAborting(slot, cl)
	for j, i := range send {
		if results[j] != nil {
			errs[i] = classify(recs[j].Topic, results[j])
		} else {
			errs[i] = fmt.Errorf("heraldkafka: transaction %s aborted: %w", slot.id, why)
		}
	}
	if !answered {
		return fmt.Errorf("heraldkafka: transaction %s aborted, no broker answered for any of %d events: %w", slot.id, len(send), why)
	}
	return nil
}

// endAborting aborts cl's transaction; when that fails too, it drops the
// client: the next one made for the slot's id fences what this one left.
func (p *Publisher) endAborting(slot *txSlot, cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), p.tx.cfg.Timeout)
	defer cancel()
	if err := cl.AbortBufferedRecords(ctx); err != nil {
		p.tx.reset(slot)
		return
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		p.log.Debug("aborting a transaction failed; the client is made again", "transactional_id", slot.id, "error", err.Error())
		p.tx.reset(slot)
	}
}
