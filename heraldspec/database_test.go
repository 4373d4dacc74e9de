package heraldspec_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// fakeDB is what the test drivers parse into: the DSN they were given,
// and a ping that fails as the DSN says.
type fakeDB struct {
	d        *heraldspec.Database
	password string
	closed   *bool
}

func (f *fakeDB) Display() string   { return "user@" + f.d.DSN[strings.LastIndex(f.d.DSN, "@")+1:] }
func (f *fakeDB) Secrets() []string { return []string{f.password} }

func (f *fakeDB) Open(context.Context) (*heraldspec.Outbox, error) {
	if strings.Contains(f.d.DSN, "fail-open") {
		return nil, errors.New("cannot open with password " + f.password)
	}
	closed := false
	f.closed = &closed
	return &heraldspec.Outbox{Client: f, CloseFunc: func() { closed = true }, PingFunc: func(context.Context) error {
		switch {
		case strings.Contains(f.d.DSN, "down"):
			return &net.OpError{Op: "dial", Err: errors.New("connection refused")}
		case strings.Contains(f.d.DSN, "refuse"):
			return errors.New("password authentication failed for password " + f.password)
		}
		return nil
	}}, nil
}

// fakeSource is the test's change-data-capture source.
type fakeSource struct{ table string }

func (fakeSource) Next(context.Context, int) (herald.SourceBatch, error) {
	return herald.SourceBatch{}, nil
}
func (fakeSource) Close() error { return nil }

func init() {
	heraldspec.RegisterDatabase(heraldspec.DatabaseDriver{
		Name: "fakesql", Schemes: []string{"fakesql"}, Keywords: []string{"server", "secret"},
		Secrets: func(dsn string) []string {
			if _, pw, ok := strings.Cut(dsn, "secret="); ok {
				return []string{strings.Fields(pw)[0]}
			}
			return heraldspec.UserinfoSecrets(dsn, false)
		},
		Unreachable: func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne)
		},
		Parse: func(d *heraldspec.Database) (heraldspec.DatabaseTarget, error) {
			pw := heraldspec.DSNSecrets(d.DSN)
			switch {
			case strings.Contains(d.DSN, "echo"):
				// A client library that quotes the DSN in its error.
				return nil, errors.New("cannot parse " + d.DSN)
			case d.Table == "bad":
				return nil, &heraldspec.DatabaseError{Field: "Table", Err: errors.New(`"bad" is not allowed`)}
			}
			f := &fakeDB{d: d}
			if len(pw) > 0 {
				f.password = pw[0]
			}
			return f, nil
		},
	})
	heraldspec.RegisterDatabase(heraldspec.DatabaseDriver{
		Name: "fakefile", Prefixes: []string{"fakefile:"},
		Parse: func(d *heraldspec.Database) (heraldspec.DatabaseTarget, error) { return &fakeDB{d: d}, nil },
	})
	heraldspec.RegisterSource(heraldspec.SourceDriver{Driver: "fakesql",
		Open: func(_ context.Context, p *heraldspec.ParsedDatabase, _ *heraldspec.Outbox, _ any) (heraldspec.ChangeSource, error) {
			return fakeSource{table: p.Table}, nil
		}})
}

func TestParseDatabaseFindsTheDriverByTheDSNsForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, driver string }{
		{"fakesql://u:hunter2@h/db", "fakesql"},
		{"  FakeSQL://u@h/db ", "fakesql"},
		{"server=h secret=hunter2", "fakesql"},
		{"fakefile:x.db", "fakefile"},
		{"fakefile://x.db", "fakefile"},
	} {
		p, err := heraldspec.ParseDatabase(heraldspec.Database{DSN: tc.dsn})
		require.NoError(t, err, tc.dsn)
		require.Equal(t, tc.driver, p.Driver, tc.dsn)
		require.Equal(t, strings.TrimSpace(tc.dsn), p.DSN, "the DSN is kept trimmed")
	}
}

func TestParseDatabaseRefusalsNameTheFieldNeverThePassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		db    heraldspec.Database
		field string
		says  string
	}{
		{"NoDSN", heraldspec.Database{DSN: "  "}, "DSN", "Database.DSN: no DSN"},
		{"UnknownScheme", heraldspec.Database{DSN: "oracle://u:hunter2@h/db"}, "DSN",
			`Database.DSN: scheme "oracle" is not supported: use fakesql://, `},
		{"NotADSN", heraldspec.Database{DSN: "localhost:5432"}, "DSN", "Database.DSN: not a DSN: use fakesql://"},
		{"KeywordFormListed", heraldspec.Database{DSN: "h:1"}, "DSN", "fakefile:PATH, a server=... connection string"},
		{"DriverQuotesTheDSN", heraldspec.Database{DSN: "fakesql://u:hunter2@echo/db"}, "DSN",
			"Database.DSN: cannot parse fakesql://u:xxxxx@echo/db"},
		{"DriverQuotesAKeywordDSN", heraldspec.Database{DSN: "server=echo secret=hunter2"}, "DSN",
			"Database.DSN: cannot parse server=echo secret=xxxxx"},
		{"FieldOfTheDriver", heraldspec.Database{DSN: "fakesql://h/db", Table: "bad"}, "Table", `Database.Table: "bad" is not allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := heraldspec.ParseDatabase(tc.db)
			require.Error(t, err)
			var de *heraldspec.DatabaseError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.field, de.Field)
			require.Contains(t, err.Error(), tc.says)
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, de.Reason(), "hunter2")
		})
	}
}

func TestDSNFormsAreToldFromNames(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"fakesql://h/db": true, "oracle://h/db": true, "fakefile:x": true,
		"server=h": true, "anything=h": true, "Server=h": false, "h:5432": false, "": false, "a b://x": false,
	} {
		require.Equal(t, want, heraldspec.IsDSN(s), s)
	}
	require.True(t, heraldspec.DSNKeyword("server"))
	require.False(t, heraldspec.DSNKeyword("orders"))
	require.Equal(t, []string{"hunter2"}, heraldspec.DSNSecrets("fakesql://u:hunter2@h/db"))
	require.Equal(t, []string{"hunter2"}, heraldspec.DSNSecrets(" server=h secret=hunter2"))
	require.Empty(t, heraldspec.DSNSecrets("oracle://u:hunter2@h/db"), "no driver, no secrets known")
}

func TestOpenReachesTheDatabaseAndToldUnreachableFromRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	p, o, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "fakesql://u:hunter2@up/db"})
	require.NoError(t, err)
	require.Equal(t, "user@up/db", p.Display())
	require.Contains(t, p.Secrets(), "hunter2")
	require.NoError(t, o.Reach(ctx))
	o.Close()
	require.True(t, *o.Client.(*fakeDB).closed)

	for _, tc := range []struct {
		host        string
		unreachable bool
	}{{"down", true}, {"refuse", false}} {
		p, err := heraldspec.ParseDatabase(heraldspec.Database{DSN: "fakesql://u:hunter2@" + tc.host + "/db"})
		require.NoError(t, err)
		lazy, err := p.OpenPool(ctx)
		require.NoError(t, err, "a pool opens without its server")
		_, err = p.Open(ctx)
		var oe *heraldspec.DatabaseOpenError
		require.ErrorAs(t, err, &oe, tc.host)
		require.Equal(t, tc.unreachable, oe.Unreachable, tc.host)
		require.Equal(t, "user@"+tc.host+"/db", oe.Database)
		require.Contains(t, err.Error(), "cannot reach the database user@"+tc.host+"/db: ")
		require.NotContains(t, err.Error(), "hunter2")
		require.ErrorAs(t, lazy.Reach(ctx), &oe)
		lazy.Close()
	}

	_, err = heraldspec.ParseDatabase(heraldspec.Database{DSN: "fakesql://u:hunter2@fail-open/db"})
	require.NoError(t, err)
	_, _, err = heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "fakesql://u:hunter2@fail-open/db"})
	var oe *heraldspec.DatabaseOpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable)
	require.NotContains(t, err.Error(), "hunter2")
}

func TestOpenSourceNeedsAPackageThatReadsTheDriversLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, o, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "fakesql://up/db", Table: "events"})
	require.NoError(t, err)
	defer o.Close()
	require.True(t, heraldspec.HasSource("fakesql"))
	src, err := p.OpenSource(ctx, o, nil)
	require.NoError(t, err)
	require.Equal(t, fakeSource{table: "events"}, src)

	p, o, err = heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "fakefile:x.db"})
	require.NoError(t, err)
	defer o.Close()
	require.False(t, heraldspec.HasSource("fakefile"))
	_, err = p.OpenSource(ctx, o, nil)
	require.ErrorContains(t, err, "no change-data-capture source reads a fakefile database")
}

func TestRegisterDatabaseRefusesWhatIsTakenOrIncomplete(t *testing.T) {
	t.Parallel()
	parse := func(*heraldspec.Database) (heraldspec.DatabaseTarget, error) { return nil, nil }
	for name, d := range map[string]heraldspec.DatabaseDriver{
		"NoForm":          {Name: "x1", Parse: parse},
		"NoParse":         {Name: "x2", Schemes: []string{"x2"}},
		"SameName":        {Name: "fakesql", Schemes: []string{"x3"}, Parse: parse},
		"SameScheme":      {Name: "x4", Schemes: []string{"fakesql"}, Parse: parse},
		"SamePrefix":      {Name: "x5", Prefixes: []string{"fakefile:"}, Parse: parse},
		"SecondKeywordDB": {Name: "x6", Keywords: []string{"host"}, Parse: parse},
	} {
		require.Panics(t, func() { heraldspec.RegisterDatabase(d) }, name)
	}
	require.Panics(t, func() {
		heraldspec.RegisterSource(heraldspec.SourceDriver{Driver: "fakesql",
			Open: func(context.Context, *heraldspec.ParsedDatabase, *heraldspec.Outbox, any) (heraldspec.ChangeSource, error) {
				return nil, nil
			}})
	}, "a second source for a driver")
}

// heraldspec is where drivers and publishers register: it must link none
// of them, nor their clients, so that a program links only the ones it
// imports.
func TestHeraldspecLinksNoDriverNorPublisher(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/herald-outbox/herald/heraldspec", "go list listed the package itself")
	for _, dep := range deps {
		for _, banned := range []string{"/driver/", "/publish/", "github.com/jackc/", "github.com/go-sql-driver/", "modernc.org/sqlite"} {
			require.NotContains(t, dep, banned, "heraldspec depends on %s", dep)
		}
	}
}
