package heraldsqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/herald-outbox/herald/driver/internal/doctor"
	"github.com/herald-outbox/herald/heraldspec"
)

// The checks of Diagnose, in the order it reports them.
const (
	CheckSchema      = "schema"
	CheckJournalMode = "journal_mode"
	CheckBusyTimeout = "busy_timeout"
	CheckSynchronous = "synchronous"
	CheckFreePages   = "free_pages"
	CheckWALFile     = "wal_file"
)

// The thresholds of Diagnose's checks.
const (
	// busyTimeoutLow is the busy timeout under which a writer gives up
	// on the lock too soon for relays and producers that take turns on
	// it (Open sets 30s).
	busyTimeoutLow = 5 * time.Second
	// freeBytesLimit and freeShare: more free pages than both (a size and
	// a share of the file) is a file bloated by events since deleted.
	freeBytesLimit = 32 << 20
	freeShare      = 0.5
	// walFileLimit is the size of the write-ahead log file past which
	// checkpoints are not keeping it small.
	walFileLimit = 32 << 20
)

var _ heraldspec.Diagnoser = (*Driver)(nil)

// sqliteFacts are what Diagnose read from the database, before any of it
// is judged.
type sqliteFacts struct {
	table, name     string
	version, latest int
	journalMode     string
	busyTimeout     time.Duration
	synchronous     int // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
	autoVacuum      int // 0 NONE, 1 FULL, 2 INCREMENTAL
	pageSize        int64
	pages, free     int64
	file            string // the main database file; "" for a temporary or in-memory one
	walSize         int64  // -1: no write-ahead log file
}

// Diagnose reads the database's settings and the file's state and returns
// what it finds, in order: the table's migration version, the journal
// mode (WAL, so that readers do not block the writer), the busy timeout
// and the synchronous setting of the pool's connections, the free pages
// of a file bloated by deleted events, and the size of the write-ahead
// log file. Each finding says how to fix it. It reads pragmas and the
// file's size only. The lease and the clock do not apply: a SQLite
// database lives on the relay's host, and its transactions hold nothing
// back but checkpoints (which the write-ahead log's size shows).
func (d *Driver) Diagnose(ctx context.Context, p heraldspec.DiagnoseParams) ([]heraldspec.Finding, error) {
	if p.Lease < 0 {
		return nil, errors.New("heraldsqlite: DiagnoseParams.Lease must not be negative")
	}
	f := sqliteFacts{table: d.names.Table, name: d.names.Table, latest: latestVersion(), walSize: -1}
	var err error
	if f.version, err = d.schemaVersion(ctx, d.db); err != nil {
		return nil, err
	}
	// One connection for every pragma: busy_timeout and synchronous are
	// a connection's own.
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: doctor: %w", err)
	}
	defer c.Close()
	var busyMS int64
	for _, r := range []struct {
		pragma string
		into   any
	}{
		{"journal_mode", &f.journalMode}, {"busy_timeout", &busyMS}, {"synchronous", &f.synchronous},
		{"auto_vacuum", &f.autoVacuum}, {"page_size", &f.pageSize}, {"page_count", &f.pages}, {"freelist_count", &f.free},
	} {
		if err := c.QueryRowContext(ctx, "PRAGMA "+r.pragma).Scan(r.into); err != nil {
			return nil, fmt.Errorf("heraldsqlite: doctor: reading PRAGMA %s: %w", r.pragma, err)
		}
	}
	f.busyTimeout = time.Duration(busyMS) * time.Millisecond
	rows, err := c.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: doctor: reading PRAGMA database_list: %w", err)
	}
	for rows.Next() {
		var seq int
		var name, file string
		if err := rows.Scan(&seq, &name, &file); err != nil {
			rows.Close()
			return nil, fmt.Errorf("heraldsqlite: doctor: reading PRAGMA database_list: %w", err)
		}
		if name == "main" {
			f.file = file
		}
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: doctor: reading PRAGMA database_list: %w", err)
	}
	if f.file != "" {
		switch st, err := os.Stat(f.file + "-wal"); {
		case err == nil:
			f.walSize = st.Size()
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("heraldsqlite: doctor: %w", err)
		}
	}
	return f.findings(), nil
}

// findings judges what Diagnose read: every threshold and every word of
// the doctor's SQLite findings.
func (f sqliteFacts) findings() []heraldspec.Finding {
	var out []heraldspec.Finding
	add := func(s heraldspec.Severity, check, msg, fix string) {
		out = append(out, heraldspec.Finding{Severity: s, Check: check, Message: msg, Fix: fix})
	}
	out = append(out, doctor.Schema(f.table, f.version, f.latest, "herald migrate --table "+f.name))

	const reopen = "or open the database with heraldsqlite.Open, which sets it on every connection"
	if mode := strings.ToLower(f.journalMode); mode != "wal" {
		add(heraldspec.SeverityError, CheckJournalMode, fmt.Sprintf("journal_mode is %s, not wal: every claim of the relay blocks the producers' reads, and theirs the relay", mode),
			"PRAGMA journal_mode = WAL; (the file keeps it), "+reopen)
	} else {
		add(heraldspec.SeverityOK, CheckJournalMode, "journal_mode is wal: readers do not block the writer", "")
	}

	fix := "PRAGMA busy_timeout = 30000; on every connection, " + reopen
	switch {
	case f.busyTimeout == 0:
		add(heraldspec.SeverityError, CheckBusyTimeout, "busy_timeout is 0: a claim or a producer's write that finds the database locked fails at once (SQLITE_BUSY)", fix)
	case f.busyTimeout < busyTimeoutLow:
		add(heraldspec.SeverityWarning, CheckBusyTimeout, fmt.Sprintf("busy_timeout is %s: relays and producers taking turns on the lock may wait longer and fail (SQLITE_BUSY)", f.busyTimeout), fix)
	default:
		add(heraldspec.SeverityOK, CheckBusyTimeout, fmt.Sprintf("busy_timeout is %s", f.busyTimeout), "")
	}

	if f.synchronous == 0 {
		add(heraldspec.SeverityWarning, CheckSynchronous, "synchronous is OFF: a power loss or an operating system crash may lose commits, or corrupt the file",
			"PRAGMA synchronous = NORMAL; on every connection, "+reopen)
	} else {
		add(heraldspec.SeverityOK, CheckSynchronous, fmt.Sprintf("synchronous is %s", synchronousName(f.synchronous)), "")
	}

	freeBytes := f.free * f.pageSize
	if freeBytes > freeBytesLimit && float64(f.free) > freeShare*float64(f.pages) {
		fix := "VACUUM; (it rewrites the file: it takes the write lock, and as much free disk as the file's live pages, while it runs)"
		if f.autoVacuum == 2 {
			fix = "PRAGMA incremental_vacuum; returns the free pages to the file system"
		}
		add(heraldspec.SeverityWarning, CheckFreePages, fmt.Sprintf("%s of the file's %s are free pages (%d of %d): deleted events left it bloated",
			doctor.BytesText(freeBytes), doctor.BytesText(f.pages*f.pageSize), f.free, f.pages), fix)
	} else {
		add(heraldspec.SeverityOK, CheckFreePages, fmt.Sprintf("%d of the file's %d pages are free", f.free, f.pages), "")
	}

	switch {
	case f.walSize > walFileLimit:
		add(heraldspec.SeverityWarning, CheckWALFile, fmt.Sprintf("the write-ahead log file is %s: a long read transaction kept checkpoints from restarting it, or one large transaction wrote it",
			doctor.BytesText(f.walSize)),
			"end long read transactions, then PRAGMA wal_checkpoint(TRUNCATE); (it waits for readers, and truncates the file)")
	case f.walSize >= 0:
		add(heraldspec.SeverityOK, CheckWALFile, fmt.Sprintf("the write-ahead log file is %s", doctor.BytesText(f.walSize)), "")
	}
	return out
}

func synchronousName(n int) string {
	switch n {
	case 1:
		return "NORMAL"
	case 2:
		return "FULL"
	case 3:
		return "EXTRA"
	}
	return fmt.Sprint(n)
}
