package heraldsqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// maxOpenConns is the pool size Open sets.
const maxOpenConns = 4

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// dsnParams configure every connection Open makes. busy_timeout makes a
// writer wait for the lock instead of failing at once. SQLite's waiters
// poll for the lock rather than queue for it, so with relays and producers
// all writing, one writer can lose the race for seconds on a loaded
// machine: 30s, not the common 5s, keeps that from failing a producer's
// transaction (seen at 5s on 2 busy cores). _txlock=immediate
// makes BEGIN take the write lock, so a transaction that reads and then
// writes cannot fail half-way with SQLITE_BUSY_SNAPSHOT (WAL's answer to a
// reader whose snapshot went stale before it tried to write).
var dsnParams = url.Values{
	"_pragma": {
		"busy_timeout(30000)",
		"journal_mode(WAL)",
		"synchronous(NORMAL)",
		"foreign_keys(1)",
	},
	"_txlock": {"immediate"},
}.Encode()

// Open opens the SQLite database at path, creating the file and its
// directory when missing, configured for Herald and its producers: WAL
// journal (readers do not block the writer), synchronous=NORMAL (durable
// across process crashes; a power loss may drop the last commits), a 5s
// busy timeout, foreign keys on, and BEGIN IMMEDIATE for every transaction
// (db.BeginTx takes the write lock at once, so transactions, read-only ones
// included, queue for it rather than fail later), with a pool of 4
// connections.
//
// Open refuses, without changing it, a file that is not a SQLite database.
func Open(path string) (*sql.DB, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("heraldsqlite: Open needs the path of a database file, not %q", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: cannot open database %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("heraldsqlite: cannot open database %s: cannot create its directory: %w", path, err)
	}
	if err := checkFile(abs); err != nil {
		return nil, fmt.Errorf("heraldsqlite: cannot open database %s: %w", path, err)
	}

	db, err := sql.Open("sqlite", fileDSN(abs))
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: cannot open database %s: %w", path, err)
	}
	// Writes take turns on the database's lock whatever the pool size;
	// readers (status, listings, a handler's queries) run beside them in
	// WAL. One connection would drain a backlog faster (measured on 20,000
	// events: about 60k/s against 50k/s with 2 to 16, as every connection
	// whose snapshot another one changed drops its page cache), but it
	// would make any read wait behind an open transaction, and a goroutine
	// that queries db while holding a transaction on it would deadlock.
	// Idle connections are kept: opening one reruns the pragmas.
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxOpenConns)
	if err := probe(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("heraldsqlite: cannot open database %s: %w", path, err)
	}
	return db, nil
}

// fileDSN returns the data source name of the database file at abs, an
// absolute path, with dsnParams. It is a file: URI, so that a path with
// '?' or '#' in it means that file: the driver takes the query from the
// first '?', and SQLite decodes the path's %XX escapes.
func fileDSN(abs string) string {
	slashed := filepath.ToSlash(abs)
	if !strings.HasPrefix(slashed, "/") {
		slashed = "/" + slashed // C:/x.db
	}
	return (&url.URL{Scheme: "file", Path: slashed, OmitHost: true}).String() + "?" + dsnParams
}

// checkFile creates the database file when missing and refuses one that is
// not a SQLite database, before SQLite writes to it: SQLite itself would
// fail too, but only once it tried to set the journal mode.
func checkFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	switch {
	case n == 0 && (errors.Is(err, io.EOF) || err == nil):
		return nil // new or empty: SQLite makes it a database
	case errors.Is(err, io.ErrUnexpectedEOF) || (err == nil && !bytes.Equal(head, sqliteHeader)):
		return errNotADatabase
	case err != nil:
		return err
	}
	return nil
}

var errNotADatabase = errors.New("the file is not a SQLite database (file is not a database); it was left unchanged")

// probe connects once, which runs the pragmas, and checks WAL took effect.
func probe(db *sql.DB) error {
	var mode string
	err := db.QueryRowContext(context.Background(), `PRAGMA journal_mode`).Scan(&mode)
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_NOTADB {
		return errNotADatabase
	}
	if err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("the journal mode is %q, not WAL (is the file on a network file system?)", mode)
	}
	return nil
}
