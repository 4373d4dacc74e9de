package sqlstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Names are a driver's validated, quoted identifiers.
type Names struct {
	Schema     string // as configured; empty where the database has no schemas
	Table      string // as configured
	Qualified  string // "schema"."table", or "table"
	Migrations string // the migrations table, quoted the same way
	Pauses     string // the pauses table, quoted the same way
	Relays     string // the relays' heartbeats table, quoted the same way
}

// NewNames checks schema (empty for none) and table against Identifier and
// quotes them. pkg names the driver in errors, which name the Config field.
func NewNames(pkg, schema, table string) (Names, error) {
	if schema != "" && !Identifier.MatchString(schema) {
		return Names{}, fmt.Errorf("%s: Config.Schema %q must match %s", pkg, schema, Identifier)
	}
	if !Identifier.MatchString(table) {
		return Names{}, fmt.Errorf("%s: Config.Table %q must match %s", pkg, table, Identifier)
	}
	prefix := ""
	if schema != "" {
		prefix = `"` + schema + `".`
	}
	return Names{
		Schema:     schema,
		Table:      table,
		Qualified:  prefix + `"` + table + `"`,
		Migrations: prefix + `"` + table + `_migrations"`,
		Pauses:     prefix + `"` + table + `_pauses"`,
		Relays:     prefix + `"` + table + `_relays"`,
	}, nil
}

// Render fills a query template's {{.Table}}, {{.Migrations}},
// {{.Pauses}}, {{.Relays}}, {{.Name}} and {{.Schema}}, then the driver's own placeholders given as old, new
// pairs.
func (n Names) Render(tmpl string, extra ...string) string {
	pairs := append([]string{
		"{{.Table}}", n.Qualified,
		"{{.Migrations}}", n.Migrations,
		"{{.Pauses}}", n.Pauses,
		"{{.Relays}}", n.Relays,
		"{{.Name}}", n.Table,
		"{{.Schema}}", `"` + n.Schema + `"`,
	}, extra...)
	return strings.NewReplacer(pairs...).Replace(tmpl)
}

// EncodeHeaders is the headers column of a row written by Herald: a JSON
// object of strings, "{}" when there are none.
func EncodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("encoding headers: %w", err)
	}
	return string(b), nil
}

// ApplyMigrations runs, in the caller's migration transaction, every
// migration above current in version order, each recorded by the record
// statement (version, name). It refuses a table newer than ms knows.
func ApplyMigrations(ctx context.Context, table string, ms []Migration, current int, render func(string) string,
	record string, exec func(ctx context.Context, sql string, args ...any) error) error {
	if latest := ms[len(ms)-1].Version; current > latest {
		return CheckVersion(table, current, latest)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if err := exec(ctx, render(m.SQL)); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if err := exec(ctx, record, m.Version, m.Name); err != nil {
			return fmt.Errorf("recording migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// MigrationScript is what ApplyMigrations runs to bring table from schema
// version from to the latest of ms, as one script for a migration tool:
// begin, then, for a new table (from 0), the statements of setup; each
// later migration rendered, followed by the INSERT into migrationsTable
// that records it; then COMMIT.
func MigrationScript(table, migrationsTable, begin string, setup []string, ms []Migration, from int,
	render func(string) string) (string, error) {
	latest := ms[len(ms)-1].Version
	if from < 0 || from > latest {
		return "", fmt.Errorf("MigrationSQL: version %d is not between 0 and %d", from, latest)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- Herald outbox table %s: schema version %d to %d.\n%s;\n", table, from, latest, begin)
	if from == 0 {
		for _, st := range setup {
			fmt.Fprintf(&b, "%s;\n", st)
		}
	}
	for _, m := range ms {
		if m.Version <= from {
			continue
		}
		fmt.Fprintf(&b, "\n-- migration %d: %s\n%s\n", m.Version, m.Name, strings.TrimSpace(render(m.SQL)))
		fmt.Fprintf(&b, "INSERT INTO %s (version, name) VALUES (%d, '%s');\n",
			migrationsTable, m.Version, strings.ReplaceAll(m.Name, "'", "''"))
	}
	b.WriteString("\nCOMMIT;\n")
	return b.String(), nil
}

// WalkKeysFactor bounds the keys one ordered claim visits, as a multiple of
// its limit, so that a table full of blocked keys costs each claim a
// bounded walk; a cursor makes the next claim go on from there.
const WalkKeysFactor = 2

// Claimers are a driver's two claim forms.
type Claimers struct {
	Unordered func(ctx context.Context, p herald.ClaimParams) ([]ClaimedRow, error)
	// Ordered walks the keys. It takes every key as free (as of an
	// unordered topic) when p.Unordered: Claim calls it then for a claim
	// with paused topics.
	Ordered func(ctx context.Context, p herald.ClaimParams, perKey int) ([]ClaimedRow, error)
}

// Claim is every driver's Store.Claim: it checks the limit, picks the
// claim form, and returns the batch in write order, which is each key's
// order (RETURNING comes in no particular order). A row it could not read
// comes back marked (herald.MarkUnreadable) for the relay to refuse, so
// that it is dead with the reason, its ordered key parked and the key's
// later events held back, and counted and logged as every dead event is.
func Claim(ctx context.Context, pkg string, p herald.ClaimParams, c Claimers) ([]herald.Envelope, error) {
	if p.Limit < 0 {
		return nil, fmt.Errorf("%s: claiming: negative limit %d", pkg, p.Limit)
	}
	if p.MaxBytes < 0 {
		return nil, fmt.Errorf("%s: claiming: negative byte bound %d", pkg, p.MaxBytes)
	}
	if p.Limit == 0 {
		return nil, nil
	}
	if p.MaxBytes == 0 {
		p.MaxBytes = math.MaxInt64
	}
	var (
		rows []ClaimedRow
		err  error
	)
	if p.Unordered && len(p.PausedTopics) == 0 {
		rows, err = c.Unordered(ctx, p)
	} else {
		// With topics paused an unordered claim walks the keys too (every
		// key free, as for an unordered topic): the claim by age would
		// read every paused event in the ready index to pass them, where
		// the walk passes a paused topic in one probe.
		perKey := p.PerKey
		if perKey <= 0 || perKey > p.Limit {
			perKey = p.Limit
		}
		rows, err = c.Ordered(ctx, p, perKey)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: claiming: %w", pkg, err)
	}
	slices.SortFunc(rows, func(a, b ClaimedRow) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(rows) == 0 {
		return nil, nil
	}
	envs := make([]herald.Envelope, len(rows))
	for i := range rows {
		envs[i] = rows[i].Envelope
		if rows[i].Unreadable != "" {
			herald.MarkUnreadable(&envs[i], "row: "+rows[i].Unreadable)
		}
	}
	return envs, nil
}

// CheckPause checks an operator's pause: a known kind, a name that is not
// blank, texts the database keeps as they are (UTF-8, no NUL) and within
// heraldadmin.MaxPauseText.
func CheckPause(kind herald.PauseKind, name string, texts ...string) error {
	if kind != herald.PauseTopic && kind != herald.PauseDestination {
		return fmt.Errorf("pausing: kind %q is neither %q nor %q", kind, herald.PauseTopic, herald.PauseDestination)
	}
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("pausing: the %s to pause is empty", kind)
	}
	for _, t := range append([]string{name}, texts...) {
		switch {
		case len(t) > heraldadmin.MaxPauseText:
			return fmt.Errorf("pausing: %d bytes is longer than the %d a pause's name, reason or author may have", len(t), heraldadmin.MaxPauseText)
		case !utf8.ValidString(t) || strings.ContainsRune(t, 0):
			return errors.New("pausing: a pause's name, reason and author must be UTF-8 text without NUL")
		}
	}
	return nil
}

// MaxRelayText is the most bytes a heartbeat's owner or version may have:
// the relays table is read whole by every status and admin page.
const MaxRelayText = 1024

// CheckBeat checks a relay's heartbeat: an owner that is not blank, texts
// the database keeps as they are (UTF-8, no NUL) and within MaxRelayText,
// an expiry in the future and no negative count.
func CheckBeat(b herald.RelayBeat) error {
	if strings.TrimSpace(b.Owner) == "" {
		return errors.New("heartbeat: the relay's owner is empty")
	}
	for _, t := range []string{b.Owner, b.Version} {
		switch {
		case len(t) > MaxRelayText:
			return fmt.Errorf("heartbeat: %d bytes is longer than the %d a relay's owner or version may have", len(t), MaxRelayText)
		case !utf8.ValidString(t) || strings.ContainsRune(t, 0):
			return errors.New("heartbeat: a relay's owner and version must be UTF-8 text without NUL")
		}
	}
	switch {
	case b.Expiry <= 0:
		return fmt.Errorf("heartbeat: expiry %s is not positive", b.Expiry)
	case b.Running < 0:
		return fmt.Errorf("heartbeat: running time %s is negative", b.Running)
	case b.Leased < 0 || b.Published < 0:
		return fmt.Errorf("heartbeat: negative count (leased %d, published %d)", b.Leased, b.Published)
	}
	return nil
}
