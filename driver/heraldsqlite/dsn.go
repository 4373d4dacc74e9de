package heraldsqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/herald-outbox/herald/heraldspec"
)

// init makes heraldspec open this package's DSNs (see ParseDSN).
func init() {
	heraldspec.RegisterDatabase(heraldspec.DatabaseDriver{
		Name:     "sqlite",
		Prefixes: []string{"sqlite:"},
		Parse: func(d *heraldspec.Database) (heraldspec.DatabaseTarget, error) {
			return ParseDSN(d)
		},
	})
}

// DSNConfig is a checked SQLite database: the file and the driver's
// Config. Open opens it.
type DSNConfig struct {
	// Path is the database file.
	Path string
	// Config is the driver's: the outbox table's name. It may still be
	// changed before Open.
	Config Config

	d *heraldspec.Database
}

// missingFile is a database file that does not exist, refused without
// heraldspec.Database.Create.
type missingFile struct{ path string }

func (e missingFile) Error() string {
	return "SQLite database " + e.path + " does not exist; Database.Create creates it"
}

func (e missingFile) Unwrap() error { return fs.ErrNotExist }

// ParseDSN checks a sqlite:PATH DSN of d and the outbox table's name.
// Without d.Create, the file must exist (an error wrapping
// fs.ErrNotExist otherwise).
//
// The DSN form:
//
//	sqlite:PATH (or sqlite://PATH, the same file: sqlite:///var/x.db)
//
// PATH is a file opened with Open's settings, relative to the working
// directory unless it starts with '/'. A file that does not exist is
// refused unless heraldspec.Database.Create is set: a mistyped path
// would otherwise become a new, empty database. SQLite has no schemas:
// heraldspec.Database's Table names the outbox table; its Config may be
// a *Config.
func ParseDSN(d *heraldspec.Database) (*DSNConfig, error) {
	c := &DSNConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, &heraldspec.DatabaseError{Field: "Config", Err: fmt.Errorf("a %T, not a *heraldsqlite.Config", d.Config)}
	}
	path, _ := strings.CutPrefix(d.DSN, "sqlite:")
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, errors.New("sqlite: needs a file path, as in sqlite:path/to/file.db")
	}
	c.Path = path
	if d.Schema != "" && d.Schema != "public" {
		return nil, &heraldspec.DatabaseError{Field: "Schema", Err: errors.New("SQLite has no schemas; name the table with Database.Table")}
	}
	if d.Table != "" {
		c.Config.Table = d.Table
	}
	if err := c.Config.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), "heraldsqlite: ")
		if rest, ok := strings.CutPrefix(msg, "Config.Table "); ok && d.Table != "" {
			return nil, &heraldspec.DatabaseError{Field: "Table", Err: errors.New(rest)}
		}
		return nil, &heraldspec.DatabaseError{Field: "Config", Err: errors.New(msg)}
	}
	if !d.Create {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, missingFile{path: heraldspec.Clean(path)}
		}
	}
	return c, nil
}

// Display is the file's path.
func (c *DSNConfig) Display() string { return c.Path }

// Secrets is none: a file has no password.
func (c *DSNConfig) Secrets() []string { return nil }

// Open opens the file (see Open), and the driver and the writer of
// c.Config on it.
func (c *DSNConfig) Open(context.Context) (*heraldspec.Outbox, error) {
	db, err := Open(c.Path)
	if err != nil {
		return nil, err
	}
	if c.d.MaxConns > 0 {
		db.SetMaxOpenConns(c.d.MaxConns)
	}
	cfg := c.Config
	driver, err := New(db, &cfg)
	if err == nil {
		var writer any
		if writer, err = NewWriter(&cfg); err == nil {
			return &heraldspec.Outbox{Store: driver, Admin: driver, Writer: writer, Client: db,
				CloseFunc: func() { _ = db.Close() }}, nil
		}
	}
	_ = db.Close()
	return nil, err
}
