package heraldpg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Change-data-capture: the driver's side of a relay whose events come from
// the write-ahead log (herald.Source, driver/heraldcdc). Inserts then
// default to the 'streamed' state, which no claim takes; the relay writes
// back to the table, with Return, only the events it did not publish.

var (
	_ herald.StreamStore  = (*Driver)(nil)
	_ herald.StreamSwitch = (*Driver)(nil)
)

// The states an insert may default to (InsertState).
const (
	stateReady    = "ready"
	stateStreamed = "streamed"
)

// streamedVersion is the schema version whose state check admits
// 'streamed' (migration 008).
const streamedVersion = 8

// KeysWaiting implements herald.StreamStore: of keys, those with a ready,
// claimed or parked row in the table, in the order given. One statement,
// at most two index probes per key.
func (d *Driver) KeysWaiting(ctx context.Context, keys []herald.TopicKey) ([]herald.TopicKey, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	topics, ks := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		topics[i], ks[i] = k.Topic, k.Key
	}
	var out []herald.TopicKey
	err := d.db.query(ctx, d.q.keysWaiting, []any{topics, ks}, func(scan func(...any) error) error {
		var k herald.TopicKey
		if err := scan(&k.Topic, &k.Key); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: reading the keys waiting in the table: %w", err)
	}
	return out, nil
}

// Return implements herald.StreamStore in one statement (returnSQL). Every
// event of p.Events needs its Failure in p.Failed; a Failure of no event
// is an unreadable row, written into its streamed row only. On a
// partitioned table an event is matched to its row by id and created_at,
// the primary key.
func (d *Driver) Return(ctx context.Context, p herald.ReturnParams) (int, error) {
	if len(p.Events) == 0 && len(p.Failed) == 0 {
		return 0, nil
	}
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return 0, err
	}
	w, err := newReturnWrites(p, l.partitioned)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: returning streamed events: %w", err)
	}
	sql := d.q.returnRows
	if l.partitioned {
		sql = d.q.returnPart
	}
	var n int64
	if err := queryRow(ctx, d.db, sql, w.args(), &n); err != nil {
		return 0, fmt.Errorf("heraldpg: returning streamed events: %w", err)
	}
	return int(n), nil
}

// returnWrites are Return's arrays: the events with their outcomes, then
// the unreadable rows' outcomes.
type returnWrites struct {
	ids, topics, keys, types, aggTypes, aggIDs, headers []string
	seqs                                                []int64
	payloads                                            [][]byte
	created, available                                  []*time.Time
	versions                                            []int32
	aggVers                                             []*int64
	events                                              outcomeColumns

	unreadableIDs []string
	unreadable    outcomeColumns
}

// outcomeColumns are what an outcome writes in a row.
type outcomeColumns struct {
	dead, park []bool
	attempts   []int32
	delayUS    []int64
	err        []*string
}

func (c *outcomeColumns) add(f herald.Failure, attempt int) error {
	o := f.Outcome
	if !o.Dead() && !o.Refunded() && o != herald.OutcomeRetry {
		return fmt.Errorf("event %s: outcome %q does not return an event to the table", f.ID, o)
	}
	if o.Refunded() {
		attempt--
	}
	var delay int64
	if !o.Dead() {
		delay = max(f.Delay.Microseconds(), 0)
	}
	var msg *string
	if !o.KeepsLastError() {
		msg = &f.Error
	}
	c.dead, c.park = append(c.dead, o.Dead()), append(c.park, o == herald.OutcomeParked)
	c.attempts = append(c.attempts, int32(min(max(attempt, 0), sqlstore.MaxAttempts)))
	c.delayUS, c.err = append(c.delayUS, delay), append(c.err, msg)
	return nil
}

// newReturnWrites pairs each event with its failure, before any SQL. An
// event given twice is written once (on a partitioned table, where two
// rows may share an id, once per id and created_at); so is a failure.
func newReturnWrites(p herald.ReturnParams, partitioned bool) (returnWrites, error) {
	var w returnWrites
	failures := make(map[string]herald.Failure, len(p.Failed))
	for _, f := range p.Failed {
		if !validUUID(f.ID) {
			return w, fmt.Errorf("failure of %q: not an event id (a UUID)", f.ID)
		}
		if _, dup := failures[f.ID]; !dup {
			failures[f.ID] = f
		}
	}
	type rowKey struct {
		id      string
		created time.Time
	}
	seen := make(map[rowKey]bool, len(p.Events))
	envelopeOf := make(map[string]bool, len(p.Events))
	for i := range p.Events {
		env := &p.Events[i]
		f, ok := failures[env.ID]
		if !ok {
			return w, fmt.Errorf("event %s has no Failure to say what becomes of it", env.ID)
		}
		k := rowKey{id: env.ID}
		if partitioned {
			k.created = env.CreatedAt
		}
		if seen[k] {
			continue
		}
		seen[k], envelopeOf[env.ID] = true, true
		if err := w.addEvent(env, f); err != nil {
			return w, err
		}
	}
	added := make(map[string]bool)
	for _, f := range p.Failed {
		if envelopeOf[f.ID] || added[f.ID] {
			continue
		}
		added[f.ID] = true
		w.unreadableIDs = append(w.unreadableIDs, f.ID)
		// The source read the row once, as a claim would have: attempt 1.
		if err := w.unreadable.add(failures[f.ID], 1); err != nil {
			return w, err
		}
	}
	return w, nil
}

func (w *returnWrites) addEvent(env *herald.Envelope, f herald.Failure) error {
	h, err := sqlstore.EncodeHeaders(env.Headers)
	if err != nil {
		return fmt.Errorf("event %s: %w", env.ID, err)
	}
	if err := w.events.add(f, env.Attempt); err != nil {
		return err
	}
	var created *time.Time
	if !env.CreatedAt.IsZero() {
		created = &env.CreatedAt
	}
	w.ids, w.seqs, w.topics, w.keys = append(w.ids, env.ID), append(w.seqs, env.Seq), append(w.topics, env.Topic), append(w.keys, env.Key)
	w.types, w.aggTypes, w.aggIDs = append(w.types, env.Type), append(w.aggTypes, env.AggregateType), append(w.aggIDs, env.AggregateID)
	w.payloads, w.headers, w.created = append(w.payloads, payload(env.Payload)), append(w.headers, h), append(w.created, created)
	w.versions = append(w.versions, eventVersion(env.EventVersion))
	w.aggVers = append(w.aggVers, aggregateVersion(env.AggregateVersion))
	w.available = append(w.available, availableAt(env.AvailableAt))
	return nil
}

// args are returnSQL's parameters, an empty array where there is nothing
// (never a NULL one).
func (w returnWrites) args() []any {
	e, u := w.events, w.unreadable
	return []any{
		uuidArray(w.ids), nonNil(w.seqs), nonNil(w.topics), nonNil(w.keys), nonNil(w.types), nonNil(w.aggTypes), nonNil(w.aggIDs),
		nonNil(w.payloads), nonNil(w.headers), nonNil(w.created), nonNil(w.versions), nonNil(w.aggVers),
		nonNil(e.dead), nonNil(e.park), nonNil(e.attempts), nonNil(e.delayUS), nonNil(e.err),
		uuidArray(w.unreadableIDs), nonNil(u.dead), nonNil(u.park), nonNil(u.attempts), nonNil(u.delayUS), nonNil(u.err),
		nonNil(w.available),
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// StreamInserts implements herald.StreamSwitch: it sets what a row
// inserted without a state becomes: 'streamed' (on), for a relay that
// reads the inserts from the write-ahead log (herald relay --source cdc),
// or 'ready' (off), for relays that claim them. It changes the state
// column's default, so it reaches every producer, plain SQL included, and
// takes a moment's ACCESS EXCLUSIVE lock on the table (waited for at most
// 10s); it does nothing when the default is the one asked for already.
//
// The order matters, both ways. On comes once the replication slot
// exists: a row inserted as streamed before the slot would be read by
// neither path, since no claim takes it. herald.Relay.Start turns it on
// for a relay with a Source, whose slot exists by then, and heraldcdc
// refuses to create a slot for a table streamed already; a caller need
// not turn it on itself. Turn it off before the change-data-capture relay
// stops, and let that relay read past the switch: rows inserted as
// streamed until then are in the slot only.
func (d *Driver) StreamInserts(ctx context.Context, on bool) error {
	v, err := d.schemaVersion(ctx, d.db)
	if err != nil {
		return err
	}
	if v < streamedVersion {
		return fmt.Errorf("heraldpg: outbox table %s is at schema version %d, streamed inserts need %d: run `herald migrate`",
			d.names.Qualified, v, streamedVersion)
	}
	want, sql := stateReady, d.q.streamOff
	if on {
		want, sql = stateStreamed, d.q.streamOn
	}
	if have, err := d.InsertState(ctx); err == nil && have == want {
		return nil
	}
	err = d.db.inTx(ctx, func(tx conn) error {
		if _, err := tx.exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
			return err
		}
		_, err := tx.exec(ctx, sql)
		return err
	})
	if err != nil {
		return fmt.Errorf("heraldpg: making inserts %s: %w", want, err)
	}
	return nil
}

// InsertState returns what a row inserted without a state becomes:
// "ready" (claimed by polling relays) or "streamed" (read from the
// write-ahead log by a change-data-capture relay; see StreamInserts). Any
// other default of the state column is an error.
func (d *Driver) InsertState(ctx context.Context) (string, error) {
	var def pgtype.Text
	if err := queryRow(ctx, d.db, d.q.insertState, []any{d.names.Qualified}, &def); err != nil {
		if errors.Is(err, errNoRows) {
			return "", fmt.Errorf("heraldpg: %s has no state column: run `herald migrate`", d.names.Qualified)
		}
		return "", fmt.Errorf("heraldpg: reading the state column's default: %w", err)
	}
	if !def.Valid {
		return "", fmt.Errorf("heraldpg: the state column of %s has no default", d.names.Qualified)
	}
	s := strings.TrimSuffix(def.String, "::text")
	switch s {
	case "'" + stateReady + "'":
		return stateReady, nil
	case "'" + stateStreamed + "'":
		return stateStreamed, nil
	}
	return "", fmt.Errorf("heraldpg: the state column of %s defaults to %s, neither 'ready' nor 'streamed'", d.names.Qualified, def.String)
}

// InsertsStreamed implements herald.StreamSwitch: whether InsertState is
// "streamed".
func (d *Driver) InsertsStreamed(ctx context.Context) (bool, error) {
	s, err := d.InsertState(ctx)
	return s == stateStreamed, err
}

// RequeueStreamed makes ready, for the polling relays, every streamed row
// created at or after since, at most limit of them per statement until none
// is left, and returns how many. It is the recovery from a replication
// slot that was dropped (or dropped and created again) while no relay read
// it: the rows it never handed out are in the table still (unless
// DeleteAfterInsert or retention removed them), and some of those made
// ready were published already, which the broker's dedup ids absorb within
// their window. Their attempts start again from zero.
func (d *Driver) RequeueStreamed(ctx context.Context, since time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("heraldpg: RequeueStreamed: limit %d is not positive", limit)
	}
	total := 0
	for {
		n, err := d.db.exec(ctx, d.q.requeueStreamed, since, limit)
		if err != nil {
			return total, fmt.Errorf("heraldpg: making streamed rows ready: %w", err)
		}
		total += int(n)
		if n < int64(limit) {
			return total, nil
		}
	}
}

// PollStreamed switches the table back to polling and makes ready every
// streamed row created at or after since, and returns how many: the
// recovery from a replication slot the change-data-capture relay can no
// longer read (dropped, or left behind on the old primary by a failover,
// since PostgreSQL does not copy logical slots to its standbys). It is
// RequeueStreamed and StreamInserts(ctx, false) done so that no key's
// events are published out of order meanwhile: a row inserted ready
// after the switch must not be claimed while an older streamed row of its
// key waits to be made ready. So the rows are made ready in batches of
// limit first, while inserts stay streamed (claims see none of them yet),
// and the few inserted meanwhile in the transaction that switches the
// default, which holds the table's lock (ACCESS EXCLUSIVE, waited for at
// most 10s) until they are ready: producers wait that long, and a row
// inserted after it is newer than every row made ready.
func (d *Driver) PollStreamed(ctx context.Context, since time.Time, limit int) (int, error) {
	total, err := d.RequeueStreamed(ctx, since, limit)
	if err != nil {
		return total, err
	}
	v, err := d.schemaVersion(ctx, d.db)
	if err != nil {
		return total, err
	}
	if v < streamedVersion {
		return total, fmt.Errorf("heraldpg: outbox table %s is at schema version %d, streamed inserts need %d: run `herald migrate`",
			d.names.Qualified, v, streamedVersion)
	}
	last := 0
	err = d.db.inTx(ctx, func(tx conn) error {
		last = 0
		if _, err := tx.exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, d.q.streamOff); err != nil {
			return fmt.Errorf("making inserts ready: %w", err)
		}
		for {
			n, err := tx.exec(ctx, d.q.requeueStreamed, since, limit)
			if err != nil {
				return fmt.Errorf("making streamed rows ready: %w", err)
			}
			last += int(n)
			if n < int64(limit) {
				return nil
			}
		}
	})
	if err != nil {
		return total, fmt.Errorf("heraldpg: switching to polling: %w", err)
	}
	return total + last, nil
}

// ForgetSlot deletes the record of positions of a change-data-capture
// slot (migration 009, read by heraldcdc): the next relay that creates a
// slot of that name starts a new record instead of refusing it as a slot
// dropped behind Herald's back. It reports whether there was one.
func (d *Driver) ForgetSlot(ctx context.Context, slot string) (bool, error) {
	n, err := d.db.exec(ctx, d.q.forgetSlot, slot)
	if err != nil {
		return false, fmt.Errorf("heraldpg: forgetting slot %s: %w", slot, err)
	}
	return n > 0, nil
}
