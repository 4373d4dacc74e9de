package heraldinbox

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// The inbox's schema, per database: migrations/<dialect>/NNN_name.sql,
// applied in version order. Never edit a released one; add the next
// number in every dialect. The inbox keeps no table of applied versions:
// every Migrate runs all of them, so each statement must be one that can
// run again as a no-op (CREATE ... IF NOT EXISTS), which is also what lets
// MySQL, which commits every DDL statement on its own, finish a migration
// cut short.
//
//go:embed migrations
var migrationFiles embed.FS

// migration is one versioned schema change of one dialect.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads migrations/dir. It panics on a misnamed file: the
// files are embedded, so that is a build mistake, caught by any test.
func loadMigrations(dir string) []migration {
	dir = path.Join("migrations", dir)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		panic(err)
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".sql") {
			panic("heraldinbox: migration file without a version: " + e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out
}

// migrationStatements renders every migration of dir with r and splits
// them into statements, in order.
func migrationStatements(dir string, r *strings.Replacer) []string {
	var out []string
	for _, m := range loadMigrations(dir) {
		st := statements(r.Replace(m.sql))
		if len(st) == 0 {
			panic(fmt.Sprintf("heraldinbox: migration %s/%s has no statement", dir, m.name))
		}
		out = append(out, st...)
	}
	return out
}

// statements splits a migration into its statements: a statement ends
// with a semicolon at the end of a line; lines of comments are dropped.
func statements(script string) []string {
	var (
		out []string
		b   strings.Builder
	)
	for line := range strings.SplitSeq(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(b.String()), ";"))
			b.Reset()
		}
	}
	if rest := strings.TrimSpace(b.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}
