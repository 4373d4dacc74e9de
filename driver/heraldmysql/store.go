package heraldmysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var (
	_ herald.Store      = (*Driver)(nil)
	_ heraldadmin.Admin = (*Driver)(nil)
)

// readCommitted is the isolation of the driver's own transactions. Under
// REPEATABLE READ, InnoDB's locking reads and range UPDATEs and DELETEs
// lock the gaps between the index records they scan (next-key locks):
// producers' INSERTs into those gaps would wait for the claim, and a
// locking read would wait on another's gap lock even with SKIP LOCKED,
// which skips locked rows, not gaps. READ COMMITTED locks rows only.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// inTx runs fn in a READ COMMITTED transaction, committed when fn returns
// nil.
func (d *Driver) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, readCommitted)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// execTx runs one statement in a READ COMMITTED transaction and returns how
// many rows it changed.
func (d *Driver) execTx(ctx context.Context, query string, args ...any) (n int, err error) {
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		n, err = execN(ctx, tx, query, args...)
		return err
	})
	return n, err
}

// execer is what a *sql.DB and a *sql.Tx have in common for writes.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func execN(ctx context.Context, e execer, query string, args ...any) (int, error) {
	r, err := e.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// queryer is what a *sql.DB and a *sql.Tx have in common for reads.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// collect runs a query and calls scan for each row.
func collect(ctx context.Context, q queryer, query string, args []any, scan func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// jsonArray encodes a parameter unpacked in SQL by JSON_TABLE.
func jsonArray(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings, numbers and booleans are ever encoded.
		panic(fmt.Sprintf("heraldmysql: encoding parameter: %v", err))
	}
	return string(b)
}

// checkLimit refuses a negative limit, which would otherwise reach the
// server as an error of its own, or be taken for no limit.
func checkLimit(limit int) error {
	if limit < 0 {
		return fmt.Errorf("heraldmysql: negative limit %d", limit)
	}
	return nil
}

// clipText makes s fit a text column of max bytes: valid UTF-8 (the
// column's character set refuses anything else, failing the whole
// statement), cut at a character boundary.
func clipText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Column sizes the driver's writes are clipped to.
const (
	maxClaimedBy = 255     // characters, VARCHAR(255); bytes are a safe bound
	maxLastError = 1 << 16 // MEDIUMTEXT holds 16 MiB; an error needs far less
)

// Claim implements herald.Store.
func (d *Driver) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	return sqlstore.Claim(ctx, "heraldmysql", p, sqlstore.Claimers{
		Unordered: d.claimUnordered,
		Ordered:   d.claimOrdered,
	})
}

// picked is a row a claim holds locked and may take: its seq and its
// bytes.
type picked struct {
	seq   int64
	bytes int64
}

// claimUnordered takes the oldest available rows by the ready index.
func (d *Driver) claimUnordered(ctx context.Context, p herald.ClaimParams) ([]sqlstore.ClaimedRow, error) {
	var seqs []int64
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var rows []picked
		err := collect(ctx, tx, d.q.claimReady, []any{p.Limit}, func(r *sql.Rows) error {
			var pk picked
			err := r.Scan(&pk.seq, &pk.bytes)
			rows = append(rows, pk)
			return err
		})
		if err != nil {
			return err
		}
		seqs = underBytes(rows, p.MaxBytes)
		return d.mark(ctx, tx, seqs, p)
	})
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	return d.claimedRows(ctx, seqs, p.Token)
}

// underBytes returns the seqs of rows, in order, while the bytes of those
// before each are under maxBytes: the first is always taken.
func underBytes(rows []picked, maxBytes int64) []int64 {
	var (
		seqs  []int64
		bytes int64
	)
	for _, r := range rows {
		if bytes >= maxBytes {
			break
		}
		seqs, bytes = append(seqs, r.seq), bytes+r.bytes
	}
	return seqs
}

// mark marks the rows of seqs, which tx holds locked, as claimed by p.
func (d *Driver) mark(ctx context.Context, tx *sql.Tx, seqs []int64, p herald.ClaimParams) error {
	if len(seqs) == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, d.q.markClaimed, jsonArray(seqs), p.Token, clipText(p.Owner, maxClaimedBy),
		p.Lease.Microseconds())
	return err
}

// claimedRows reads the rows a claim committed. It runs after the commit,
// so that the claim's locks are not held while payloads travel; the token
// fences it like any other write: a row rescued and claimed again in the
// meantime (a lease shorter than this read) is not returned.
func (d *Driver) claimedRows(ctx context.Context, seqs []int64, token string) ([]sqlstore.ClaimedRow, error) {
	out := make([]sqlstore.ClaimedRow, 0, len(seqs))
	err := collect(ctx, d.db, d.q.claimedRows, []any{jsonArray(seqs), token}, func(rows *sql.Rows) error {
		var (
			r       sqlstore.ClaimedRow
			headers []byte
			created datetime
		)
		if err := rows.Scan(&r.ID, &r.Seq, &r.Topic, &r.Key, &r.Type, &r.AggregateType, &r.AggregateID,
			&r.EventVersion, &r.AggregateVersion, &r.Payload, &headers, &r.Attempt, &created); err != nil {
			return err
		}
		var err error
		if r.Headers, err = sqlstore.DecodeHeaders(headers); err != nil {
			r.Unreadable = err.Error()
		}
		if !created.valid {
			r.Unreadable = "created_at is not a date"
		}
		r.CreatedAt = created.time()
		out = append(out, r)
		return nil
	})
	return out, err
}

// candidate is a key an ordered claim took, with the rows it locked.
type candidate struct {
	topic, key string
	free       bool // unordered: any available events, no key rule
	want       int  // the most rows to take
	whole      bool // want is every ready row the walk counted
	rows       []picked
}

// walkedKey is a key the walk found, with what the claim decides by.
type walkedKey struct {
	k            [2]string
	blocked, due bool
	ready        int // ready events, counted up to the bound per key
}

// walkFirst is how many keys an ordered claim's first walk asks for; the
// next walks of the same claim ask for as many as the rows found per key
// so far say are needed.
const walkFirst = 64

// claimOrdered walks the keys with ready events from where the last claim
// stopped and takes each free key's lowest available events, in one READ
// COMMITTED transaction, a few statements per round of keys however many
// keys it takes: one walks a batch of keys (walkKeysSQL), one locks the
// chosen keys' runs, one checks them (checkKeys). A key of a paused
// topic is never taken: the walk's range leaves its topic out. An
// unordered claim with paused topics walks the keys too (sqlstore.Claim),
// taking every key as free.
//
// For each key the walk nominates (none of its events claimed or parked,
// its lowest ready one available, as committed when walked), the claim
// locks the key's lowest ready rows with SKIP LOCKED. Locking alone cannot
// keep two claimers off one key: a second claimer skips the first's
// locked rows and would lock the rows after them, and a claim that
// committed between the walk and the lock has changed the key. So once
// its rows are locked, the claim reads the key again (checkKeys, a
// statement of its own that does not lock, so it sees every commit up to
// now): a key with an event claimed or parked is dropped, and of the rows
// it locked it keeps those that are the key's lowest ready rows, in order,
// up to the first that is not.
//
// Why that suffices, for claimers A and B of one key. If B's claim
// committed before A's check read, A's check sees B's claimed rows and
// drops the key. Otherwise B had not committed when A checked. If B
// locked the key's lowest ready row before A locked its rows, A skipped
// it, so A's first locked row is not the key's lowest ready one (B's,
// still ready as committed) and A keeps nothing. If A locked it first, B
// skipped it and keeps nothing by the same rule, and B cannot commit a
// claim of the key. A row locked by anything else (a producer's insert not
// yet committed, which no check sees either; an acknowledgement making a
// claimed row ready, which leaves the key claimed as committed) is skipped
// the same way and never claimed past.
func (d *Driver) claimOrdered(ctx context.Context, p herald.ClaimParams, perKey int) ([]sqlstore.ClaimedRow, error) {
	maxKeys := max(sqlstore.WalkKeysFactor*p.Limit, 64)
	var seqs []int64
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var (
			cands []candidate
			seen  = map[[2]string]bool{}
		)
		err := d.cursor.Walk(maxKeys, p.Limit, func(from [2]string) (visited, rows int, last [2]string, err error) {
			k, ask := from, min(walkFirst, maxKeys)
			for visited < maxKeys && rows < p.Limit {
				// Nominate from a batch of keys until the rows planned are
				// enough, lock and check them: what the check drops
				// leaves room for more keys.
				keys, err := d.walkKeys(ctx, tx, k, ask, perKey, p.PausedTopics)
				if err != nil {
					return 0, 0, last, err
				}
				round, planned, used := len(cands), rows, 0
				for _, wk := range keys {
					if planned >= p.Limit || visited >= maxKeys {
						break
					}
					used++
					visited, last, k = visited+1, wk.k, wk.k
					if seen[wk.k] {
						continue
					}
					seen[wk.k] = true
					free := p.Unordered || wk.k[1] == "" || slices.Contains(p.UnorderedTopics, wk.k[0])
					if !free && (wk.blocked || !wk.due) {
						continue
					}
					if n := min(perKey, p.Limit-planned, wk.ready); n > 0 {
						cands = append(cands, candidate{topic: wk.k[0], key: wk.k[1], free: free, want: n,
							whole: n == wk.ready && wk.ready < perKey})
						planned += n
					}
				}
				if err := d.lockRuns(ctx, tx, cands[round:]); err != nil {
					return 0, 0, last, err
				}
				if err := d.checkKeys(ctx, tx, cands[round:]); err != nil {
					return 0, 0, last, err
				}
				rows = 0
				for _, c := range cands {
					rows += len(c.rows)
				}
				if used == len(keys) && len(keys) < ask {
					break // no key left after k
				}
				// Ask for as many keys as the rows found per key visited
				// so far say are still needed, and a few more.
				ask = min(maxKeys-visited, max(16, (p.Limit-rows)*visited/max(rows, 1)+8))
			}
			return visited, rows, last, nil
		})
		if err != nil || len(cands) == 0 {
			return err
		}
		seqs = take(cands, p.Limit, p.MaxBytes)
		return d.mark(ctx, tx, seqs, p)
	})
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	return d.claimedRows(ctx, seqs, p.Token)
}

// walkKeys returns up to n keys with ready events after from, in order,
// leaving out the topics of skip; counts stop at perKey.
func (d *Driver) walkKeys(ctx context.Context, tx *sql.Tx, from [2]string, n, perKey int, skip []string) ([]walkedKey, error) {
	query := d.q.walkKeys
	args := make([]any, 0, 5+len(skip))
	args = append(args, perKey-1, from[0], from[0], from[1])
	if len(skip) > 0 {
		query += fmt.Sprintf(walkPausedSQL, strings.TrimSuffix(strings.Repeat("?, ", len(skip)), ", "))
		for _, t := range skip {
			args = append(args, t)
		}
	}
	args = append(args, n)
	keys := make([]walkedKey, 0, n)
	err := collect(ctx, tx, query+d.q.walkKeysEnd, args, func(rows *sql.Rows) error {
		var wk walkedKey
		err := rows.Scan(&wk.k[0], &wk.k[1], &wk.blocked, &wk.due, &wk.ready)
		keys = append(keys, wk)
		return err
	})
	return keys, err
}

// keysPerStatement bounds the keys one locking or checking statement
// names in parts of a UNION (keyRunSQL, keyCheckSQL), four parameters
// each.
const keysPerStatement = 200

// keyList encodes cands for keysJSONSQL: [index, topic, key, free], topic
// and key in hex.
func keyList(cands []candidate, idx []int) string {
	keys := make([][4]any, len(idx))
	for j, i := range idx {
		free := 0
		if cands[i].free {
			free = 1
		}
		keys[j] = [4]any{i, hex.EncodeToString([]byte(cands[i].topic)), hex.EncodeToString([]byte(cands[i].key)), free}
	}
	return jsonArray(keys)
}

// lockRuns locks each candidate's lowest ready rows, at most its want:
// for an ordered key up to the first not yet available, for a free key
// its available ones. The keys whose every ready row the claim wants are
// locked by one statement (lockKeysSQL); the others take a part each of
// a UNION, keysPerStatement to a statement. A whole key may have gained
// ready rows since the walk counted them (a late commit): the rows beyond
// its want stay locked, untaken, until the claim commits.
func (d *Driver) lockRuns(ctx context.Context, tx *sql.Tx, cands []candidate) error {
	type lockedRow struct {
		picked
		due bool
	}
	locked := make([][]lockedRow, len(cands))
	scan := func(rows *sql.Rows) error {
		var (
			i int
			r lockedRow
		)
		if err := rows.Scan(&i, &r.seq, &r.due, &r.bytes); err != nil {
			return err
		}
		if i < 0 || i >= len(cands) {
			return fmt.Errorf("heraldmysql: a locked row of key %d, of %d", i, len(cands))
		}
		locked[i] = append(locked[i], r)
		return nil
	}
	var whole, parted []int
	for i, c := range cands {
		if c.whole {
			whole = append(whole, i)
		} else {
			parted = append(parted, i)
		}
	}
	if len(whole) > 0 {
		if err := collect(ctx, tx, d.q.lockKeys, []any{keyList(cands, whole)}, scan); err != nil {
			return err
		}
	}
	for len(parted) > 0 {
		chunk := parted[:min(len(parted), keysPerStatement)]
		parted = parted[len(chunk):]
		parts := make([]string, len(chunk))
		args := make([]any, 0, 4*len(chunk))
		for j, i := range chunk {
			c := cands[i]
			parts[j] = d.q.keyRun
			if c.free {
				parts[j] = d.q.keyAvailable
			}
			args = append(args, i, c.topic, c.key, c.want)
		}
		if err := collect(ctx, tx, strings.Join(parts, "\n\tUNION ALL\n\t"), args, scan); err != nil {
			return err
		}
	}
	for i := range cands {
		// Neither a UNION nor a join promises an order: sort each run.
		slices.SortFunc(locked[i], func(a, b lockedRow) int { return cmp.Compare(a.seq, b.seq) })
		cands[i].rows = nil
		for _, r := range locked[i][:min(len(locked[i]), cands[i].want)] {
			if !r.due {
				break
			}
			cands[i].rows = append(cands[i].rows, r.picked)
		}
	}
	return nil
}

// checkKeys reads the ordered candidates again after their rows were
// locked (see claimOrdered) and cuts each one's rows to those still its
// lowest ready rows; a key found claimed or parked keeps none. One
// statement: the whole keys' ready rows by one join, every key's claimed
// or parked events by one probe each, and a part of a UNION for each
// other key, keysPerStatement of those to a statement.
func (d *Driver) checkKeys(ctx context.Context, tx *sql.Tx, cands []candidate) error {
	var ordered []int // indexes into cands
	for i, c := range cands {
		if !c.free && len(c.rows) > 0 {
			ordered = append(ordered, i)
		}
	}
	lowest := map[int][]int64{}
	blocked := map[int]bool{}
	scan := func(rows *sql.Rows) error {
		var (
			i   int
			seq int64
		)
		if err := rows.Scan(&i, &seq); err != nil {
			return err
		}
		if seq < 0 {
			blocked[i] = true
		} else {
			lowest[i] = append(lowest[i], seq)
		}
		return nil
	}
	for first := true; first || len(ordered) > 0; first = false {
		chunk := ordered[:min(len(ordered), keysPerStatement)]
		ordered = ordered[len(chunk):]
		var (
			parts []string
			args  []any
			whole []int
		)
		for _, i := range chunk {
			if cands[i].whole {
				whole = append(whole, i)
				continue
			}
			c := cands[i]
			parts = append(parts, d.q.keyCheck)
			args = append(args, i, c.topic, c.key, len(c.rows))
		}
		if len(whole) > 0 {
			parts = append(parts, d.q.checkRows)
			args = append(args, keyList(cands, whole))
		}
		if len(chunk) > 0 {
			parts = append(parts, d.q.checkBlocked)
			args = append(args, keyList(cands, chunk))
		}
		if len(parts) == 0 {
			break
		}
		if err := collect(ctx, tx, strings.Join(parts, "\n\tUNION ALL\n\t"), args, scan); err != nil {
			return err
		}
	}
	for i := range cands {
		if cands[i].free || len(cands[i].rows) == 0 {
			continue
		}
		if blocked[i] {
			cands[i].rows = nil
			continue
		}
		slices.Sort(lowest[i]) // neither a UNION nor a join promises an order
		// Both lists are in seq order: keep the common prefix.
		n := 0
		for n < len(cands[i].rows) && n < len(lowest[i]) && cands[i].rows[n].seq == lowest[i][n] {
			n++
		}
		cands[i].rows = cands[i].rows[:n]
	}
	return nil
}

// take returns the seqs to claim of the checked candidates: in candidate
// order, at most limit in all, while the bytes of those before each are
// under maxBytes.
func take(cands []candidate, limit int, maxBytes int64) []int64 {
	var rows []picked
	for _, c := range cands {
		rows = append(rows, c.rows...)
	}
	return underBytes(rows[:min(len(rows), limit)], maxBytes)
}

// Complete implements herald.Store: one statement when every event was
// published, else one transaction that locks the rows the token holds and
// writes each one's outcome.
func (d *Driver) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	var res herald.CompleteResult
	if len(p.Published)+len(p.Failed) == 0 {
		return res, nil
	}
	if len(p.Failed) == 0 {
		query := d.q.publish
		if p.Delete {
			query = d.q.publishDelete
		}
		n, err := execN(ctx, d.db, query, jsonArray(p.Published), p.Token)
		if err != nil {
			return res, fmt.Errorf("heraldmysql: acknowledging batch: %w", err)
		}
		res.Published = n
		return res, nil
	}
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		res = herald.CompleteResult{}
		ids := make([]string, 0, len(p.Published)+len(p.Failed))
		ids = append(ids, p.Published...)
		for _, f := range p.Failed {
			ids = append(ids, f.ID)
		}
		held := map[string]bool{}
		err := collect(ctx, tx, d.q.held, []any{jsonArray(ids), p.Token}, func(rows *sql.Rows) error {
			var id string
			err := rows.Scan(&id)
			held[id] = true
			return err
		})
		if err != nil || len(held) == 0 {
			return err
		}
		for _, id := range p.Published {
			if held[id] {
				res.Published++
			}
		}
		for _, f := range p.Failed {
			if held[f.ID] {
				res.Failed = append(res.Failed, f.ID)
			}
		}
		rest := p
		if p.Delete && len(p.Published) > 0 {
			if _, err := tx.ExecContext(ctx, d.q.publishDelete, jsonArray(p.Published), p.Token); err != nil {
				return err
			}
			rest.Published = nil
		}
		_, err = tx.ExecContext(ctx, d.q.complete, outcomes(rest), p.Token)
		return err
	})
	if err != nil {
		return herald.CompleteResult{}, fmt.Errorf("heraldmysql: acknowledging batch: %w", err)
	}
	return res, nil
}

// outcomes encodes p's writes for outcomeSQL: [id, published, dead, park,
// refund, delay_us, has_error, error], the booleans as numbers.
func outcomes(p herald.CompleteParams) string {
	w := sqlstore.NewWrites(p)
	rows := make([][8]any, len(w.IDs))
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	for i := range w.IDs {
		msg, has := "", 0
		if w.Error[i] != nil {
			msg, has = clipText(*w.Error[i], maxLastError), 1
		}
		rows[i] = [8]any{w.IDs[i], b(w.Published[i]), b(w.Dead[i]), b(w.Park[i]), b(w.Refund[i]), w.DelayUS[i], has, msg}
	}
	return jsonArray(rows)
}

// ReleaseClaim implements herald.Store.
func (d *Driver) ReleaseClaim(ctx context.Context, token string) (int, error) {
	n, err := d.bySeq(ctx, d.q.claimedBy, []any{token}, d.q.releaseClaim, token)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: releasing a claim: %w", err)
	}
	return n, nil
}

// RescueExpired implements herald.Store. It finds expired leases with a
// read that locks nothing, which is all it does while every lease runs,
// then rescues them by seq in one statement that checks again, on each
// row it locks, that the lease is still over.
func (d *Driver) RescueExpired(ctx context.Context, limit int) (int, error) {
	if err := checkLimit(limit); err != nil {
		return 0, err
	}
	n, err := d.bySeq(ctx, d.q.expired, []any{limit}, d.q.rescue)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: rescuing expired leases: %w", err)
	}
	return n, nil
}

// bySeq runs pick, a read that locks nothing, then change on the rows of
// the seqs it found, locked one primary key lookup at a time; change
// re-checks what pick selected by. A scan that locked as it went would
// lock, and wait for, rows it does not change, such as the claimed rows of
// an acknowledgement under way: two such waits in opposite orders are a
// deadlock.
func (d *Driver) bySeq(ctx context.Context, pick string, args []any, change string, more ...any) (int, error) {
	var seqs []int64
	err := collect(ctx, d.db, pick, args, func(rows *sql.Rows) error {
		var s int64
		err := rows.Scan(&s)
		seqs = append(seqs, s)
		return err
	})
	if err != nil || len(seqs) == 0 {
		return 0, err
	}
	return execN(ctx, d.db, change, append([]any{jsonArray(seqs)}, more...)...)
}

// DeletePublished implements herald.Store.
func (d *Driver) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if err := checkLimit(limit); err != nil {
		return 0, err
	}
	n, err := d.execTx(ctx, d.q.deletePublished, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: deleting published rows: %w", err)
	}
	return n, nil
}
