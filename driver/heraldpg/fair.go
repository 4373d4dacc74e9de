package heraldpg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Fair claims (Config.FairBy). Without them an ordered claim walks the
// keys with ready events in (topic, key) order from where the last claim
// stopped, so a backlog spread over many keys of one topic or tenant
// takes every claim until the walk has passed all of them, and an
// unordered claim takes the oldest events first, the whole backlog before
// anything written after it. A fair claim first lists the values of the
// fairness key that have ready events (one index probe each, from where
// the last claim stopped), then walks the keys of all of them in turns,
// each value from a cursor of its own, and claims what the walk found in
// that order: every value visited gets an equal share of the batch
// (events and keys), and what a value leaves of its share goes to the
// values that want more, in further rounds of the same walk. Each key
// keeps its order: the keys are taken, locked and claimed exactly as in
// the ordered claim (walkTakeSQL, claimKeysSQL).

// fairKey is a parsed Config.FairBy.
type fairKey struct {
	by    string // as configured: topic, header:NAME, column:NAME
	expr  string // the key of row o, as text ('' when the row has none)
	bare  string // the same of the table's row, for the index
	index string // the index the probes need, unqualified; "" for topic (migration 002's)
}

// parseFairBy parses Config.FairBy for the table named table. A header's
// name is one a producer may set (herald.ValidateHeaderName) without a
// quote or backslash, so that it is a SQL literal as it is; a column's is
// an identifier, quoted.
func parseFairBy(by, table string) (*fairKey, error) {
	if by == "" {
		return nil, nil
	}
	kind, name, _ := strings.Cut(by, ":")
	f := &fairKey{by: by}
	switch {
	case by == "topic":
		f.expr, f.bare = "o.topic", "topic"
		return f, nil
	case kind == "header":
		if err := herald.ValidateHeaderName(name); err != nil {
			return nil, fmt.Errorf("heraldpg: Config.FairBy %q: %w", by, err)
		}
		if strings.ContainsAny(name, `'\`) {
			return nil, fmt.Errorf("heraldpg: Config.FairBy %q: a header name with a quote or backslash is not supported", by)
		}
		f.expr = "coalesce(o.headers ->> '" + name + "', '')"
		f.bare = "coalesce(headers ->> '" + name + "', '')"
	case kind == "column":
		if !sqlstore.Identifier.MatchString(name) {
			return nil, fmt.Errorf("heraldpg: Config.FairBy %q: a column name is lower-case letters, digits and _, "+
				"starting with a letter or _, at most 40 bytes", by)
		}
		if name == "topic" {
			return nil, fmt.Errorf(`heraldpg: Config.FairBy %q: write "topic"`, by)
		}
		f.expr = `coalesce((o."` + name + `")::text, '')`
		f.bare = `coalesce(("` + name + `")::text, '')`
	default:
		return nil, fmt.Errorf(`heraldpg: Config.FairBy %q: want "topic", "header:NAME" or "column:NAME"`, by)
	}
	h := fnv.New32a()
	h.Write([]byte(by))
	f.index = fmt.Sprintf("%s_fair_%08x_idx", table, h.Sum32())
	return f, nil
}

// ClaimsFair reports whether claims are fair (Config.FairBy), for the
// relay's fair lane (herald.FairClaims).
func (d *Driver) ClaimsFair() bool { return d.fair != nil }

// indexSQL creates the index a fair claim's probes need: the
// fairness key, then the key index's columns, on the ready rows. It runs
// on a partitioned table as it is (an index on the parent is created on
// every partition).
func (f *fairKey) indexSQL(n names) string {
	return `CREATE INDEX IF NOT EXISTS "` + f.index + `" ON ` + n.Qualified +
		` ((` + f.bare + `), topic, key, seq) WHERE state = 'ready'`
}

// createFairIndex is Migrate's part for Config.FairBy.
func (d *Driver) createFairIndex(ctx context.Context, tx conn) error {
	if d.fair == nil || d.fair.index == "" {
		return nil
	}
	if _, err := tx.exec(ctx, d.fair.indexSQL(d.names)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "42703": // undefined_column
				return fmt.Errorf("Config.FairBy %q: the outbox table %s has no such column: add it first", d.fair.by, d.names.Qualified)
			case "42P17": // invalid_object_definition: a cast that is not immutable
				return fmt.Errorf("Config.FairBy %q: the column's text form depends on session settings "+
					"(a timestamptz, for instance), so it cannot be indexed: use a column of text, an integer or a uuid", d.fair.by)
			}
		}
		return fmt.Errorf("Config.FairBy %q: creating index %s: %w", d.fair.by, d.fair.index, err)
	}
	return nil
}

// fairIndexReady reports an error unless the index Config.FairBy needs
// exists and is valid; once it was found, it is not looked for again.
func (d *Driver) fairIndexReady(ctx context.Context) error {
	if d.fair == nil || d.fair.index == "" || d.fairChecked.Load() {
		return nil
	}
	var valid []bool
	err := d.db.query(ctx, `SELECT i.indisvalid FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND i.indrelid = $3::regclass`,
		[]any{d.names.Schema, d.fair.index, d.names.Qualified}, func(scan func(...any) error) error {
			var v bool
			valid = append(valid, v)
			return scan(&valid[len(valid)-1])
		})
	switch {
	case err != nil:
		return fmt.Errorf("heraldpg: looking for the index of Config.FairBy %q: %w", d.fair.by, err)
	case len(valid) == 0:
		return fmt.Errorf("heraldpg: Config.FairBy %q needs index %s on %s, which is missing: "+
			"run `herald migrate --fair-by %s` (or Driver.Migrate with Config.FairBy set)",
			d.fair.by, d.fair.index, d.names.Qualified, d.fair.by)
	case !valid[0]:
		return fmt.Errorf("heraldpg: Config.FairBy %q: index %s on %s is not valid (a build that failed): "+
			"drop it and run `herald migrate --fair-by %s`", d.fair.by, d.fair.index, d.names.Qualified, d.fair.by)
	}
	d.fairChecked.Store(true)
	return nil
}

// fairCursor remembers where fair claims stopped: after which value (in
// the turn, from the last value down) the next claim starts, and where each value's own walk over its keys
// stopped. Cursors of values not visited for a while are forgotten (the
// value's walk then starts from its first key), so that memory stays
// bounded whatever the number of values.
type fairCursor struct {
	mu     sync.Mutex
	value  string // the last value visited, when after
	after  bool
	keys   map[string]fairAt
	claims uint64
	// backlogged are the values a claim left wanting more than the
	// batch had room for, with that claim's number; a claim that finds a
	// value's keys run out removes it. The fair lane's claims
	// (herald.ClaimParams.SkipBacklogged) leave them out.
	backlogged map[string]uint64
}

type fairAt struct {
	at    [2]string // topic and key
	claim uint64    // the claim that last moved it
}

// fairForgetAfter is how many claims a value's cursor is kept unmoved.
const fairForgetAfter = 256

// fairBackloggedFor is how many claims a value stays backlogged unless
// one of them finds it so again: a value no claim has visited for that
// long is left to the fair lane too, for its share of a lane's batch.
const fairBackloggedFor = 16

// backloggedNow returns the values the fair lane leaves out now.
func (c *fairCursor) backloggedNow() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.backlogged))
	for v, at := range c.backlogged {
		if c.claims-at < fairBackloggedFor {
			out[v] = true
		}
	}
	return out
}

// fairRounds bounds the walks of one claim: the first gives every value
// its share, the next hand what some left over to the others (and take a
// value that ran out of keys round to its first one).
const fairRounds = 4

// fairGroup is one value during a claim.
type fairGroup struct {
	val     string
	start   [2]string // where its walk started this claim
	from    [2]string
	wrapped bool
	visited [][2]string // the keys it visited, in walk order, with...
	taken   []bool      // ...whether the walk took each
	ranOut  bool
	cut     bool // its last round ended at its share: it may want more
}

// fairKeyAt is a key a fair walk found, with its place in the claim.
type fairKeyAt struct {
	key         [2]string
	round, n, g int
	size        int
	free        bool
}

// walkFair is the fair claim's walk (see fairWalkSQL): the keys to claim,
// in the order that gives each value its share first, and a function that
// moves the cursors once the claim knows which keys it took events of.
func (d *Driver) walkFair(ctx context.Context, tx querier, p herald.ClaimParams, perKey int, unordered, paused []string,
	maxKeys int) (topics, keys []string, free []bool, done func(claimed []sqlstore.ClaimedRow), err error) {
	c := &d.fairCursor
	var skip map[string]bool
	if p.SkipBacklogged {
		// The fair lane: the values that are not backlogged, from the
		// first, with the cursors left where the full claims put them.
		if skip = c.backloggedNow(); len(skip) == 0 {
			return nil, nil, nil, func([]sqlstore.ClaimedRow) {}, nil
		}
	}
	c.mu.Lock()
	from, after := c.value, c.after
	c.mu.Unlock()
	if p.SkipBacklogged {
		from, after = "", false
	}

	vals, err := d.fairValues(ctx, tx, from, after, maxKeys)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if skip != nil {
		vals = slices.DeleteFunc(vals, func(v string) bool { return skip[v] })
		if len(vals) == 0 {
			return nil, nil, nil, func([]sqlstore.ClaimedRow) {}, nil
		}
	}
	if len(vals) < maxKeys && after {
		// The values after the cursor ran out: go on from the first.
		more, err := d.fairValues(ctx, tx, "", false, maxKeys-len(vals))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		for _, v := range more {
			if !slices.Contains(vals, v) {
				vals = append(vals, v)
			}
		}
	}
	if len(vals) == 0 {
		c.mu.Lock()
		c.after = false
		clear(c.backlogged) // nothing is ready: nothing is backlogged
		c.mu.Unlock()
		return nil, nil, nil, func([]sqlstore.ClaimedRow) {}, nil
	}

	groups := make([]*fairGroup, len(vals))
	c.mu.Lock()
	for i, v := range vals {
		at := c.keys[v].at
		groups[i] = &fairGroup{val: v, start: at, from: at}
	}
	c.mu.Unlock()

	var (
		found     []fairKeyAt
		seen      = map[[2]string]bool{}
		keysLeft  = maxKeys
		eventLeft = p.Limit
		active    = groups
	)
	for round := 0; round < fairRounds && len(active) > 0 && keysLeft > 0 && eventLeft > 0; round++ {
		qk := max(keysLeft/len(active), 1)
		qe := max((eventLeft+len(active)-1)/len(active), 1)
		var vs, ft, fk []string
		starts := make([][2]string, len(active))
		for i, g := range active {
			vs, ft, fk = append(vs, g.val), append(ft, g.from[0]), append(fk, g.from[1])
			starts[i] = g.from
		}
		visited := make([]int, len(active))
		rows := make([]int, len(active))
		err := tx.query(ctx, d.q.fairWalk, []any{ft, fk, qk, qe, perKey, unordered, d.lockSpace, paused, p.Unordered, vs},
			func(scan func(...any) error) error {
				var (
					gi, size int
					k        [2]string
					ok       bool
				)
				if err := scan(&gi, &k[0], &k[1], &ok, &size); err != nil {
					return err
				}
				g := active[gi-1]
				visited[gi-1]++
				rows[gi-1] += size
				g.from = k
				g.visited, g.taken = append(g.visited, k), append(g.taken, ok)
				if ok && !seen[k] {
					seen[k] = true
					found = append(found, fairKeyAt{key: k, round: round, n: visited[gi-1], g: gi, size: size,
						free: p.Unordered || k[1] == "" || slices.Contains(unordered, k[0])})
				}
				return nil
			})
		if err != nil {
			return nil, nil, nil, nil, err
		}
		var next []*fairGroup
		for i, g := range active {
			keysLeft -= visited[i]
			eventLeft -= rows[i]
			g.cut = false
			switch {
			case visited[i] >= qk || rows[i] >= qe:
				g.cut = true
				next = append(next, g) // cut by its share: it may want more
			case !g.wrapped && starts[i] != [2]string{}:
				// It ran out of keys after its cursor on its first walk:
				// round to its first key.
				g.wrapped, g.from = true, [2]string{}
				next = append(next, g)
			default:
				g.ranOut = true
			}
		}
		active = next
	}

	// Each turn of each round in turn; within a turn the smaller keys
	// first, so that a key with more events than the batch has room for
	// is the one the claim's limit cuts.
	slices.SortStableFunc(found, func(a, b fairKeyAt) int {
		return cmp.Or(cmp.Compare(a.round, b.round), cmp.Compare(a.n, b.n), cmp.Compare(a.size, b.size), cmp.Compare(a.g, b.g))
	})
	for _, k := range found {
		topics, keys, free = append(topics, k.key[0]), append(keys, k.key[1]), append(free, k.free)
	}
	done = func(claimed []sqlstore.ClaimedRow) {
		if !p.SkipBacklogged {
			d.fairCursor.moved(vals, len(vals) >= maxKeys, groups, claimed, cutShort(claimed, p))
		}
	}
	return topics, keys, free, done, nil
}

// cutShort reports whether a claim may have left out keys its walk took:
// it is full, or its bytes came near the bound (claimKeysSQL stops
// before the row that would cross it).
func cutShort(claimed []sqlstore.ClaimedRow, p herald.ClaimParams) bool {
	if len(claimed) >= p.Limit {
		return true
	}
	var bytes int64
	for i := range claimed {
		bytes += int64(len(claimed[i].Payload))
		for k, v := range claimed[i].Headers {
			bytes += int64(len(k) + len(v))
		}
	}
	return p.MaxBytes > 0 && bytes >= p.MaxBytes/2
}

// moved records where a fair claim stopped. A value's cursor goes to the
// last key its walk visited, except, when the claim was cut short, that
// a key the walk took and the claim got no event of is visited again:
// the cursor stops before it. A value that ran out of keys starts from
// its first key next time. A value whose keys ran out is not
// backlogged; when the claim was full, one its share cut in the claim's
// last round is. (A claim that is not full may have passed keys other
// claims hold: it changes nothing of the others.)
func (c *fairCursor) moved(vals []string, full bool, groups []*fairGroup, claimed []sqlstore.ClaimedRow, cut bool) {
	got := make(map[[2]string]bool, len(claimed))
	for i := range claimed {
		got[[2]string{claimed[i].Topic, claimed[i].Key}] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims++
	if c.keys == nil {
		c.keys, c.backlogged = map[string]fairAt{}, map[string]uint64{}
	}
	c.value, c.after = vals[len(vals)-1], full
	for _, g := range groups {
		at := g.from
		if g.ranOut {
			at = [2]string{}
		}
		for i, k := range g.visited {
			if cut && g.taken[i] && !got[k] {
				at = g.start
				if i > 0 {
					at = g.visited[i-1]
				}
				break
			}
		}
		c.keys[g.val] = fairAt{at: at, claim: c.claims}
		switch {
		case g.ranOut:
			delete(c.backlogged, g.val)
		case cut && g.cut:
			c.backlogged[g.val] = c.claims
		}
	}
	for v, at := range c.backlogged {
		if c.claims-at >= fairBackloggedFor {
			delete(c.backlogged, v)
		}
	}
	if len(c.keys) > 4*len(vals)+1024 {
		for v, a := range c.keys {
			if c.claims-a.claim > fairForgetAfter {
				delete(c.keys, v)
			}
		}
	}
}

// fairValues lists the values with ready events that come after from in
// the claims' turn, which runs from the last value down (from the last
// unless after), at most limit.
func (d *Driver) fairValues(ctx context.Context, tx querier, from string, after bool, limit int) ([]string, error) {
	var vals []string
	err := tx.query(ctx, d.q.fairValues, []any{from, !after, limit}, func(scan func(...any) error) error {
		var v string
		if err := scan(&v); err != nil {
			return err
		}
		vals = append(vals, v)
		return nil
	})
	return vals, err
}
