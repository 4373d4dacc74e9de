package heraldspec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Database is one database's outbox table as a spec gives it. Databases
// open the way destinations do: each driver package owns its DSN forms
// and registers them here when it is imported.
//
//	import (
//		"github.com/herald-outbox/herald/heraldspec"
//		_ "github.com/herald-outbox/herald/driver/heraldpg"
//	)
//
//	db, outbox, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: os.Getenv("DATABASE_URL")})
//	if err != nil {
//		return err // names the DSN part that is wrong, never the password
//	}
//	defer outbox.Close()
//	relay, err := herald.NewRelay(&herald.RelayConfig{Store: outbox.Store, Publisher: pub})
//
// ParseDatabase checks a database without connecting; its Open connects,
// and OpenSource opens a change-data-capture source on it (heraldcdc, for
// PostgreSQL).
type Database struct {
	// DSN is the database's connection string, whose form picks the driver
	// package: postgres:// and postgresql:// URLs or libpq's
	// host=... dbname=... strings (heraldpg), mysql:// URLs
	// (heraldmysql), sqlite:PATH (heraldsqlite). Required.
	DSN string
	// Schema holds the outbox table on PostgreSQL; the other databases
	// take none ("public" is the default everywhere, and MySQL's schema is
	// the DSN's database). Defaults to "public".
	Schema string
	// Table is the outbox table's name. Defaults to "herald_outbox".
	Table string
	// Logger receives the logs of what opens on the database (a
	// change-data-capture source). Defaults to slog.Default().
	Logger *slog.Logger
	// ApplicationName names the connections on servers that show it
	// (PostgreSQL's application_name); the DSN's own wins. Defaults to
	// "herald".
	ApplicationName string
	// MaxConns bounds the connections of the pool Open makes; the DSN's
	// own bound (PostgreSQL's pool_max_conns) wins. Defaults to the
	// driver's: pgx's (4, or the CPUs when more), 4 for SQLite, none for
	// MySQL.
	MaxConns int
	// ConnectTimeout bounds Open's check that the database answers.
	// Defaults to 10s.
	ConnectTimeout time.Duration
	// Create lets a SQLite file that does not exist be created. Defaults
	// to false: a missing file is refused, so that a mistyped path is not
	// taken for a new, empty database.
	Create bool
	// Config is the driver's Config to start from, for settings a DSN does
	// not carry (a *heraldpg.Config with ClaimRows); Schema and Table,
	// when set, override its names. A Config of another driver's type is
	// refused. Defaults to the driver's defaults.
	Config any
}

// Log is d's logger, or slog.Default().
func (d *Database) Log() *slog.Logger {
	if d.Logger != nil {
		return d.Logger
	}
	return slog.Default()
}

// Timeout is d.ConnectTimeout or its default.
func (d *Database) Timeout() time.Duration {
	if d.ConnectTimeout > 0 {
		return d.ConnectTimeout
	}
	return 10 * time.Second
}

// Application is d.ApplicationName or its default.
func (d *Database) Application() string {
	if d.ApplicationName != "" {
		return d.ApplicationName
	}
	return "herald"
}

// DatabaseDriver is what a driver package registers: the DSN forms it
// takes and how it parses them.
type DatabaseDriver struct {
	// Name names the driver: "postgres", "mysql", "sqlite".
	Name string
	// Schemes are the URL schemes of its DSNs, lower-case, written
	// scheme://...: "postgres", "postgresql".
	Schemes []string
	// Prefixes are the starts of its DSNs that are not URLs: "sqlite:".
	Prefixes []string
	// Keywords are the keywords of its keyword=value DSNs (libpq's host,
	// dbname, ...); a DSN that starts with a lower-case word and '=' is
	// the driver's. One driver at most takes that form. A program that
	// reads NAME=DSN must not take one of them for a NAME (DSNKeyword).
	Keywords []string
	// Secrets returns the secrets a DSN holds as written, parseable or
	// not (the password), so that a program that redacts its output can
	// register them before parsing. Nil: none.
	Secrets func(dsn string) []string
	// Unreachable reports whether an error of the pool's ping means the
	// server could not be reached (down, refusing connections, timing
	// out, starting up), rather than that it refused the configuration
	// (the credentials, an unknown database). Nil: none is.
	Unreachable func(err error) bool
	// Parse checks d (its DSN trimmed), reading the files the DSN names
	// but connecting to nothing, and returns what opens it. An error that
	// is not a *DatabaseError is about the DSN.
	Parse func(d *Database) (DatabaseTarget, error)
}

// DatabaseTarget is a parsed database, ready to open: each driver
// package's own type (a *heraldpg.DSNConfig).
type DatabaseTarget interface {
	// Display is the database without its password, for logs and
	// errors: user@host:port/dbname, or a SQLite file's path.
	Display() string
	// Secrets are the secrets of the parsed configuration, wherever they
	// came from (the DSN, a password file), for a program that redacts
	// its output.
	Secrets() []string
	// Open opens the connection pool and the outbox table's store on it,
	// without waiting for the server: a pool connects on first use.
	Open(ctx context.Context) (*Outbox, error)
}

// Outbox is an opened database: the outbox table's store and admin, and
// the pool they run on.
type Outbox struct {
	// Store is the relay's store: the driver's *Driver.
	Store herald.Store
	// Admin is the operators' API on the same table (the same *Driver).
	Admin heraldadmin.Admin
	// Writer writes events into the same table in a caller's transaction:
	// a *herald.Writer[pgx.Tx] on PostgreSQL, a *herald.Writer[*sql.Tx]
	// on SQLite and MySQL.
	Writer any
	// Client is the pool: a *pgxpool.Pool, or a *sql.DB.
	Client any
	// CloseFunc closes Client; set by the driver package (call Close).
	CloseFunc func()
	// PingFunc connects and asks the server to answer; set by the driver
	// package (call Reach). Nil when there is no server (SQLite).
	PingFunc func(ctx context.Context) error

	spec *ParsedDatabase
}

// Close closes the pool. The store and writer need nothing more.
func (o *Outbox) Close() {
	if o.CloseFunc != nil {
		o.CloseFunc()
	}
}

// Reach checks that the database answers, within its ConnectTimeout. A
// failure is a *DatabaseOpenError.
func (o *Outbox) Reach(ctx context.Context) error {
	if o.PingFunc == nil {
		return nil
	}
	if o.spec == nil {
		return errors.New("heraldspec: Reach needs an Outbox from ParsedDatabase.Open or OpenPool")
	}
	ctx, cancel := context.WithTimeout(ctx, o.spec.Timeout())
	defer cancel()
	err := o.PingFunc(ctx)
	if err == nil {
		return nil
	}
	unreachable := o.spec.driver.Unreachable != nil && o.spec.driver.Unreachable(err)
	return &DatabaseOpenError{Database: o.spec.Display(), Unreachable: unreachable, Err: err,
		msg: "cannot reach the database " + o.spec.Display() + ": " + o.spec.scrub(err.Error())}
}

// ChangeSource is a change-data-capture source that a spec opened: the
// relay's RelayConfig.Source, closed once the relay stopped.
type ChangeSource interface {
	herald.Source
	Close() error
}

// SourceDriver is what a change-data-capture package registers: the
// database driver whose outbox tables it reads, and how.
type SourceDriver struct {
	// Driver is the DatabaseDriver's Name: "postgres".
	Driver string
	// Open opens a source on the outbox table of p, which o (opened from
	// p) relays. cfg is the source package's Config to start from, or
	// nil.
	Open func(ctx context.Context, p *ParsedDatabase, o *Outbox, cfg any) (ChangeSource, error)
}

var databases = struct {
	sync.RWMutex
	byName   map[string]*DatabaseDriver
	byScheme map[string]*DatabaseDriver
	prefixes []*DatabaseDriver
	keywords *DatabaseDriver
	sources  map[string]*SourceDriver
}{byName: map[string]*DatabaseDriver{}, byScheme: map[string]*DatabaseDriver{}, sources: map[string]*SourceDriver{}}

// RegisterDatabase makes d's DSN forms open through d. Driver packages
// call it from init. It panics when a name, scheme or prefix is
// registered twice, when two drivers take keyword=value DSNs, or when d
// is incomplete.
func RegisterDatabase(d DatabaseDriver) {
	if d.Name == "" || len(d.Schemes)+len(d.Prefixes)+len(d.Keywords) == 0 || d.Parse == nil {
		panic("heraldspec: RegisterDatabase needs a Name, a DSN form and Parse")
	}
	databases.Lock()
	defer databases.Unlock()
	if _, dup := databases.byName[d.Name]; dup {
		panic("heraldspec: database driver " + d.Name + " is registered twice")
	}
	for _, s := range d.Schemes {
		if _, dup := databases.byScheme[s]; dup {
			panic("heraldspec: DSN scheme " + s + ":// is registered twice")
		}
	}
	for _, p := range d.Prefixes {
		for _, other := range databases.prefixes {
			if slices.Contains(other.Prefixes, p) {
				panic("heraldspec: DSN prefix " + p + " is registered twice")
			}
		}
	}
	if len(d.Keywords) > 0 && databases.keywords != nil {
		panic("heraldspec: keyword=value DSNs are registered twice")
	}
	for _, s := range d.Schemes {
		databases.byScheme[s] = &d
	}
	if len(d.Prefixes) > 0 {
		databases.prefixes = append(databases.prefixes, &d)
	}
	if len(d.Keywords) > 0 {
		databases.keywords = &d
	}
	databases.byName[d.Name] = &d
}

// RegisterSource makes the outboxes of s.Driver's databases open a
// change-data-capture source through s. Source packages call it from
// init; it panics when the driver has a source already.
func RegisterSource(s SourceDriver) {
	if s.Driver == "" || s.Open == nil {
		panic("heraldspec: RegisterSource needs a Driver and Open")
	}
	databases.Lock()
	defer databases.Unlock()
	if _, dup := databases.sources[s.Driver]; dup {
		panic("heraldspec: a change-data-capture source for " + s.Driver + " is registered twice")
	}
	databases.sources[s.Driver] = &s
}

// keywordStart is how a keyword=value DSN starts.
var keywordStart = regexp.MustCompile(`^[a-z_]+\s*=`)

// urlScheme is a URL's scheme, before "://".
var urlScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*$`)

// dsnDriver finds the registered driver of a trimmed DSN.
func dsnDriver(dsn string) (*DatabaseDriver, error) {
	databases.RLock()
	defer databases.RUnlock()
	for _, d := range databases.prefixes {
		for _, p := range d.Prefixes {
			if strings.HasPrefix(dsn, p) {
				return d, nil
			}
		}
	}
	scheme, _, isURL := strings.Cut(dsn, "://")
	switch {
	case isURL && urlScheme.MatchString(scheme):
		if d, ok := databases.byScheme[strings.ToLower(scheme)]; ok {
			return d, nil
		}
		return nil, &DSNFormError{Scheme: Clean(scheme)}
	case !isURL && databases.keywords != nil && keywordStart.MatchString(dsn):
		return databases.keywords, nil
	}
	return nil, &DSNFormError{}
}

// IsDSN reports whether s starts as a DSN does: a URL's scheme and
// "://" (registered or not), a registered prefix, or a lower-case word
// and '=' when a driver takes keyword=value DSNs.
func IsDSN(s string) bool {
	if scheme, _, ok := strings.Cut(s, "://"); ok && urlScheme.MatchString(scheme) {
		return true
	}
	databases.RLock()
	defer databases.RUnlock()
	for _, d := range databases.prefixes {
		for _, p := range d.Prefixes {
			if strings.HasPrefix(s, p) {
				return true
			}
		}
	}
	return databases.keywords != nil && keywordStart.MatchString(s)
}

// DSNKeyword reports whether word is a keyword of a registered driver's
// keyword=value DSNs: host=db dbname=app is a DSN, not a database named
// host.
func DSNKeyword(word string) bool {
	databases.RLock()
	defer databases.RUnlock()
	return databases.keywords != nil && slices.Contains(databases.keywords.Keywords, word)
}

// DSNForms lists the registered DSN forms for messages: postgres://, ...,
// sqlite:PATH, and "a host=... connection string" when a driver takes
// keyword=value DSNs.
func DSNForms() []string {
	databases.RLock()
	defer databases.RUnlock()
	var out []string
	for _, s := range slices.Sorted(maps.Keys(databases.byScheme)) {
		out = append(out, s+"://")
	}
	for _, d := range databases.prefixes {
		for _, p := range d.Prefixes {
			out = append(out, p+"PATH")
		}
	}
	if databases.keywords != nil {
		out = append(out, "a "+databases.keywords.Keywords[0]+"=... connection string")
	}
	return out
}

// DSNSecrets returns the secrets a DSN holds as written, parseable or
// not, as its driver finds them: a program that redacts its output
// registers them before parsing. None for a DSN of no registered form.
func DSNSecrets(dsn string) []string {
	d, err := dsnDriver(strings.TrimSpace(dsn))
	if err != nil || d.Secrets == nil {
		return nil
	}
	return d.Secrets(strings.TrimSpace(dsn))
}

// ParsedDatabase is a checked database. The settings that do not change
// what ParseDatabase checks (Logger, ConnectTimeout) may still be set on
// it before Open, and so may the driver's Config reached through Target.
type ParsedDatabase struct {
	*Database
	// Driver is the DatabaseDriver's Name: "postgres", "mysql", "sqlite".
	Driver string

	driver *DatabaseDriver
	target DatabaseTarget
}

// Target is what the driver package parsed: its own type (a
// *heraldpg.DSNConfig), for a caller that wants to look or to set more
// of the driver's Config before Open.
func (p *ParsedDatabase) Target() DatabaseTarget { return p.target }

// Display is the database without its password: user@host:port/dbname,
// or a SQLite file's path.
func (p *ParsedDatabase) Display() string { return p.target.Display() }

// Secrets are every secret of the DSN, as written and as parsed.
func (p *ParsedDatabase) Secrets() []string {
	out := DSNSecrets(p.DSN)
	for _, s := range p.target.Secrets() {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// scrub removes p's secrets from s, then what herald.Scrub finds.
func (p *ParsedDatabase) scrub(s string) string {
	for _, secret := range p.Secrets() {
		s = strings.ReplaceAll(s, secret, Redacted)
	}
	return herald.Scrub(s)
}

// OpenPool opens the connection pool and the store without waiting for
// the server, for a program that waits for its database itself (Reach)
// or serves the store's admin before the database answers.
func (p *ParsedDatabase) OpenPool(ctx context.Context) (*Outbox, error) {
	o, err := p.target.Open(ctx)
	if err != nil {
		var oe *DatabaseOpenError
		if errors.As(err, &oe) {
			return nil, err
		}
		return nil, &DatabaseOpenError{Database: p.Display(), Err: err, msg: p.scrub(err.Error())}
	}
	o.spec = p
	return o, nil
}

// Open opens the connection pool and the store, and checks that the
// database answers. A failure is a *DatabaseOpenError.
func (p *ParsedDatabase) Open(ctx context.Context) (*Outbox, error) {
	o, err := p.OpenPool(ctx)
	if err != nil {
		return nil, err
	}
	if err := o.Reach(ctx); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// OpenSource opens the change-data-capture source of the outbox table
// that o, opened from p, relays: the relay's RelayConfig.Source. cfg is
// the source package's Config to start from (a *heraldcdc.Config for
// PostgreSQL), nil for its defaults; the connection and the table's names
// come from p. It fails when no imported package reads p's driver's log.
func (p *ParsedDatabase) OpenSource(ctx context.Context, o *Outbox, cfg any) (ChangeSource, error) {
	databases.RLock()
	s, ok := databases.sources[p.Driver]
	databases.RUnlock()
	if !ok {
		return nil, fmt.Errorf("no change-data-capture source reads a %s database (import the package that registers one: heraldcdc for PostgreSQL)", p.Driver)
	}
	return s.Open(ctx, p, o, cfg)
}

// HasSource reports whether an imported package reads the log of
// driver's databases (OpenSource).
func HasSource(driver string) bool {
	databases.RLock()
	defer databases.RUnlock()
	_, ok := databases.sources[driver]
	return ok
}

// ParseDatabase checks d: a DSN of a registered form, then what its
// driver package checks. It connects to nothing. Errors are
// *DatabaseError and never quote the password.
func ParseDatabase(d Database) (*ParsedDatabase, error) {
	d.DSN = strings.TrimSpace(d.DSN)
	if d.DSN == "" {
		return nil, &DatabaseError{Field: "DSN", Err: errors.New("no DSN")}
	}
	drv, err := dsnDriver(d.DSN)
	if err != nil {
		return nil, &DatabaseError{Field: "DSN", Err: err}
	}
	dp := &d
	t, err := drv.Parse(dp)
	if err != nil {
		var de *DatabaseError
		if !errors.As(err, &de) {
			de = &DatabaseError{Field: "DSN", Err: err}
		}
		de.secrets = DSNSecrets(d.DSN)
		return nil, de
	}
	return &ParsedDatabase{Database: dp, Driver: drv.Name, driver: drv, target: t}, nil
}

// OpenDatabase parses d and opens it.
func OpenDatabase(ctx context.Context, d Database) (*ParsedDatabase, *Outbox, error) {
	p, err := ParseDatabase(d)
	if err != nil {
		return nil, nil, err
	}
	o, err := p.Open(ctx)
	if err != nil {
		return nil, nil, err
	}
	return p, o, nil
}

// DatabaseError is a database's spec refused: the field of Database that
// is wrong, and why. Its text never quotes the password.
type DatabaseError struct {
	Field string // "DSN", "Schema", "Table" or "Config"
	Err   error  // what is wrong; it may name other fields (Database.Table)

	secrets []string
}

func (e *DatabaseError) Error() string { return "Database." + e.Field + ": " + e.Reason() }

// Reason is what is wrong, without the field: Err's text, scrubbed.
func (e *DatabaseError) Reason() string {
	s := e.Err.Error()
	for _, secret := range e.secrets {
		s = strings.ReplaceAll(s, secret, Redacted)
	}
	return herald.Scrub(s)
}

func (e *DatabaseError) Unwrap() error { return e.Err }

// DSNFormError is a DSN of no registered form: a URL whose scheme no
// imported driver package registered, or no URL at all.
type DSNFormError struct {
	Scheme string // as written; "" when the DSN is no URL
}

func (e *DSNFormError) Error() string {
	use := "use " + strings.Join(DSNForms(), ", ")
	if e.Scheme == "" {
		return "not a DSN: " + use
	}
	return fmt.Sprintf("scheme %q is not supported: %s (import the driver package that registers it)", e.Scheme, use)
}

// DatabaseOpenError is a database that could not be opened or reached.
type DatabaseOpenError struct {
	// Database is the database without its password (Display).
	Database string
	// Unreachable is true when the server could not be reached (down,
	// refusing connections, timing out, starting up): trying again later
	// may succeed. False means it refused the configuration (the
	// credentials, an unknown database).
	Unreachable bool
	// Err is the cause, as the driver reported it.
	Err error

	msg string
}

func (e *DatabaseOpenError) Error() string { return e.msg }

func (e *DatabaseOpenError) Unwrap() error { return e.Err }
