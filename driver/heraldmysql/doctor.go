package heraldmysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herald-outbox/herald/driver/internal/doctor"
	"github.com/herald-outbox/herald/heraldspec"
)

// The checks of Diagnose, in the order it reports them.
const (
	CheckSchema       = "schema"
	CheckTransactions = "long_transactions"
	CheckPurge        = "purge_lag"
	CheckClock        = doctor.CheckClock
)

// The thresholds of Diagnose's checks: InnoDB's history list length (the
// undo log records purge has not removed yet) past which purge is behind.
// Every one is an old row version that the claims' index scans may step
// over.
const (
	historyWarn  = 100_000
	historyError = 1_000_000
)

// The doctor's SQL: information_schema and settings only, no lock on the
// outbox table.
const (
	// doctorTransactionsSQL finds the server's transactions, other than
	// this session's, open for longer than ? microseconds: each holds back
	// InnoDB's purge of every row version that died after it began. Its
	// databases are the server's (purge is), so the oldest 25 are shown.
	doctorTransactionsSQL = `SELECT t.trx_mysql_thread_id, COALESCE(p.USER, ''), COALESCE(p.HOST, ''), COALESCE(p.DB, ''), t.trx_state,
	TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)), COALESCE(t.trx_query, '')
FROM information_schema.INNODB_TRX t
LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
WHERE t.trx_mysql_thread_id <> CONNECTION_ID() AND t.trx_started < NOW(6) - INTERVAL ? MICROSECOND
ORDER BY t.trx_started
LIMIT 25`
	// doctorHistorySQL reads InnoDB's history list length (0 when the
	// counter is disabled: it is enabled by default on MySQL and MariaDB).
	doctorHistorySQL = `SELECT COALESCE(MAX(COUNT), 0) FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'`
	// doctorClockSQL reads the server's clock, in microseconds since the
	// epoch whatever the session's time zone.
	doctorClockSQL = `SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`
)

var _ heraldspec.Diagnoser = (*Driver)(nil)

// mysqlFacts are what Diagnose read from the database, before any of it
// is judged.
type mysqlFacts struct {
	table, name     string
	version, latest int
	holders         []mysqlHolder
	history         int64
	dbNow           time.Time
	before, after   time.Time
}

type mysqlHolder struct {
	thread         int64
	user, host, db string
	state, query   string
	age            time.Duration
}

// Diagnose reads the server's state and returns what it finds, in order:
// the table's migration version, the transactions open longer than the
// lease (which hold back InnoDB's purge of the outbox's deleted and
// updated rows), InnoDB's history list length (purge behind), and the
// server's clock against the relay's. Each finding says how to fix it.
// It reads information_schema only, and other sessions' queries through
// herald.Scrub. An error means the database could not be read; a missing
// table is a finding.
func (d *Driver) Diagnose(ctx context.Context, p heraldspec.DiagnoseParams) ([]heraldspec.Finding, error) {
	if p.Lease < 0 {
		return nil, errors.New("heraldmysql: DiagnoseParams.Lease must not be negative")
	}
	if p.Lease == 0 {
		p.Lease = time.Minute
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	f := mysqlFacts{name: d.names.Table, latest: latestVersion()}
	var err error
	if f.version, err = d.schemaVersion(ctx, d.db); err != nil {
		return nil, err
	}
	database, err := d.database(ctx, d.db)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: doctor: %w", err)
	}
	f.table = database + "." + d.names.Table
	rows, err := d.db.QueryContext(ctx, doctorTransactionsSQL, p.Lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: doctor: reading information_schema.INNODB_TRX: %w", err)
	}
	for rows.Next() {
		var h mysqlHolder
		var age int64
		if err := rows.Scan(&h.thread, &h.user, &h.host, &h.db, &h.state, &age, &h.query); err != nil {
			rows.Close()
			return nil, fmt.Errorf("heraldmysql: doctor: reading information_schema.INNODB_TRX: %w", err)
		}
		h.age = time.Duration(age) * time.Microsecond
		f.holders = append(f.holders, h)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("heraldmysql: doctor: reading information_schema.INNODB_TRX: %w", err)
	}
	if err := d.db.QueryRowContext(ctx, doctorHistorySQL).Scan(&f.history); err != nil {
		return nil, fmt.Errorf("heraldmysql: doctor: reading information_schema.INNODB_METRICS: %w", err)
	}
	var micros int64
	f.before = p.Now()
	if err := d.db.QueryRowContext(ctx, doctorClockSQL).Scan(&micros); err != nil {
		return nil, fmt.Errorf("heraldmysql: doctor: reading the clock: %w", err)
	}
	f.after = p.Now()
	f.dbNow = time.UnixMicro(micros)
	return f.findings(p.Lease), nil
}

// findings judges what Diagnose read: every threshold and every word of
// the doctor's MySQL findings.
func (f mysqlFacts) findings(lease time.Duration) []heraldspec.Finding {
	var out []heraldspec.Finding
	add := func(s heraldspec.Severity, check, msg, fix string) {
		out = append(out, heraldspec.Finding{Severity: s, Check: check, Message: msg, Fix: fix})
	}
	out = append(out, doctor.Schema(f.table, f.version, f.latest, "herald migrate --table "+f.name))

	for _, h := range f.holders {
		who := fmt.Sprintf("thread %d", h.thread)
		if h.user != "" {
			who += fmt.Sprintf(" (user %s, host %s, database %s)", h.user, h.host, h.db)
		}
		add(doctor.HeldSeverity(h.age, lease), CheckTransactions,
			fmt.Sprintf("%s has had a transaction open for %s, longer than the lease (%s), so InnoDB cannot purge the outbox's old row versions; state %s, query: %s",
				who, doctor.RoundAge(h.age), doctor.LeaseText(lease), h.state, doctor.QuoteQuery(h.query)),
			fmt.Sprintf("KILL %d; or make the application end its transactions", h.thread))
	}
	if len(f.holders) == 0 {
		add(heraldspec.SeverityOK, CheckTransactions, fmt.Sprintf("no transaction has been open longer than the lease (%s)", doctor.LeaseText(lease)), "")
	}

	switch fix := "end the long transactions (see long_transactions); if none, give purge more threads (innodb_purge_threads) or lower the write load"; {
	case f.history > historyError:
		add(heraldspec.SeverityError, CheckPurge, fmt.Sprintf("InnoDB's history list length is %d (more than %d): purge is far behind, and the claims step over old row versions", f.history, historyError), fix)
	case f.history > historyWarn:
		add(heraldspec.SeverityWarning, CheckPurge, fmt.Sprintf("InnoDB's history list length is %d (more than %d): purge is behind", f.history, historyWarn), fix)
	default:
		add(heraldspec.SeverityOK, CheckPurge, fmt.Sprintf("InnoDB's history list length is %d", f.history), "")
	}

	out = append(out, doctor.Clock(f.before, f.dbNow, f.after))
	return out
}
