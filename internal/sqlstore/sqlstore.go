// Package sqlstore holds what Herald's SQL drivers share beyond their SQL:
// how migrations are found, how rows other programs wrote are read, how an
// operator's row selection is checked. Each driver keeps its own dialect.
package sqlstore

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Identifier is the pattern configurable schema and table names must match
// before any SQL runs: lower case, so quoted and unquoted spellings agree.
var Identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads dir of fsys: files named NNN_description.sql, NNN
// being the version. It panics on a file without a version: migrations are
// embedded, so that is a build mistake, caught by any test.
func LoadMigrations(fsys fs.FS, dir string) []Migration {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic(err)
	}
	var out []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("herald: migration file without a version: " + e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	if len(out) == 0 {
		panic("herald: no migrations in " + dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// Selection is a checked heraldadmin.EventFilter: a state and exactly one of
// IDs (normalised UUIDs), Topic or All.
type Selection struct {
	State heraldadmin.State
	IDs   []string
	Topic string
	All   bool
	Limit int
}

// Select checks an operator's filter: the state (dead by default), exactly
// one selector, well-formed ids.
func Select(f heraldadmin.EventFilter) (Selection, error) {
	s := Selection{State: f.State, Topic: f.Topic, All: f.All, Limit: f.Limit}
	if s.State == "" {
		s.State = heraldadmin.StateDead
	}
	switch s.State {
	case heraldadmin.StateReady, heraldadmin.StateClaimed, heraldadmin.StatePublished, heraldadmin.StateDead:
	default:
		return s, fmt.Errorf("unknown state %q", s.State)
	}
	if s.Limit <= 0 {
		s.Limit = 100
	}
	set := 0
	for _, b := range []bool{len(f.IDs) > 0, f.Topic != "", f.All} {
		if b {
			set++
		}
	}
	if set != 1 {
		return s, errors.New("select rows by ids, by topic, or all: exactly one")
	}
	for _, id := range f.IDs {
		u, err := uuid.Parse(id)
		if err != nil {
			return s, fmt.Errorf("%q is not an event id (a UUID)", id)
		}
		s.IDs = append(s.IDs, u.String())
	}
	return s, nil
}

// CheckVersion compares an outbox table's schema version with the latest
// one this build knows; the error says what to do about a difference.
func CheckVersion(table string, have, latest int) error {
	switch {
	case have < latest:
		return fmt.Errorf("outbox table %s is at schema version %d, this Herald needs %d: run `herald migrate`", table, have, latest)
	case have > latest:
		return fmt.Errorf("outbox table %s is at schema version %d, newer than this Herald knows (%d): upgrade Herald", table, have, latest)
	}
	return nil
}

// KeyCursor remembers where an ordered claim's walk over the keys stopped,
// so that the next claim goes on from there and every key gets its turn.
// The zero value starts at the first key.
type KeyCursor struct {
	mu sync.Mutex
	at [2]string // topic and key; both empty before the first key
}

// KeyPass is one walk over keys in (topic, key) order, starting after from.
// It reports how many keys it visited, how many rows it found to claim and
// the last key it visited.
type KeyPass func(from [2]string) (visited, rows int, last [2]string, err error)

// Walk runs pass from the cursor. A pass that runs out of keys before
// visiting maxKeys or finding limit rows is followed by one more from the
// first key, so a claim never comes back empty only because the cursor was
// near the end. The cursor moves to where the walk stopped.
func (c *KeyCursor) Walk(maxKeys, limit int, pass KeyPass) error {
	c.mu.Lock()
	from := c.at
	c.mu.Unlock()
	wrapped := from == [2]string{}
	for {
		visited, rows, last, err := pass(from)
		if err != nil {
			return err
		}
		if visited >= maxKeys || rows >= limit {
			c.mu.Lock()
			c.at = last
			c.mu.Unlock()
			return nil
		}
		if wrapped {
			c.mu.Lock()
			c.at = [2]string{}
			c.mu.Unlock()
			return nil
		}
		wrapped, from = true, [2]string{}
	}
}

// Writes is a batch's acknowledgement as the columns a driver's one
// statement unpacks: one entry per event, published ones first. The
// relay decided every outcome; these only say how each row changes.
type Writes struct {
	IDs       []string
	Published []bool
	Dead      []bool
	Park      []bool    // dead and parking its key
	Refund    []bool    // the claim's attempt is given back
	DelayUS   []int64   // ready again after this many microseconds
	Error     []*string // the new last_error; nil keeps the old one
}

// NewWrites lays out p for a driver's acknowledgement statement.
func NewWrites(p herald.CompleteParams) Writes {
	n := len(p.Published) + len(p.Failed)
	w := Writes{
		IDs: make([]string, 0, n), Published: make([]bool, 0, n), Dead: make([]bool, 0, n), Park: make([]bool, 0, n),
		Refund: make([]bool, 0, n), DelayUS: make([]int64, 0, n), Error: make([]*string, 0, n),
	}
	for _, id := range p.Published {
		w.add(id, herald.OutcomePublished, 0, nil)
	}
	for i := range p.Failed {
		f := &p.Failed[i]
		var msg *string
		if !f.Outcome.KeepsLastError() {
			msg = &f.Error
		}
		w.add(f.ID, f.Outcome, f.Delay.Microseconds(), msg)
	}
	return w
}

func (w *Writes) add(id string, o herald.Outcome, delayUS int64, msg *string) {
	w.IDs = append(w.IDs, id)
	w.Published = append(w.Published, o == herald.OutcomePublished)
	w.Dead = append(w.Dead, o.Dead())
	w.Park = append(w.Park, o == herald.OutcomeParked)
	w.Refund = append(w.Refund, o.Refunded())
	w.DelayUS = append(w.DelayUS, max(delayUS, 0))
	w.Error = append(w.Error, msg)
}

// Rows returns the writes as one JSON-encodable row per event, for
// drivers that unpack arrays from JSON: [id, published, dead, park,
// refund, delay_us, error or null].
func (w Writes) Rows() [][7]any {
	rows := make([][7]any, len(w.IDs))
	for i := range w.IDs {
		var msg any
		if w.Error[i] != nil {
			msg = *w.Error[i]
		}
		rows[i] = [7]any{w.IDs[i], w.Published[i], w.Dead[i], w.Park[i], w.Refund[i], w.DelayUS[i], msg}
	}
	return rows
}
