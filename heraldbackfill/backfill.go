package heraldbackfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
)

// ErrSourceChanged is returned by Run when the backfill's name is recorded
// over another source or topic: resuming it would mix two definitions.
// Give it another name, or reset it (Config.Restart) to start over.
var ErrSourceChanged = errors.New("heraldbackfill: a backfill of this name was recorded over another source")

// Source is the rows a backfill reads: a table, or a query. Either way
// it reads them in the order of KeyColumns, a batch at a time after the
// last key whose event committed, so KeyColumns must identify a row and
// should be indexed (a table's primary key), and must not change while
// the backfill runs.
type Source struct {
	// Table is the table to read, optionally schema-qualified
	// (schema.table). Exactly one of Table and Query is set.
	Table string
	// Query is a SELECT whose rows are read instead of a table's; it is
	// read as a subquery (SELECT ... FROM (Query) AS r), so it must be a
	// query that can be locked FOR SHARE (no GROUP BY, DISTINCT or
	// aggregate) and should let the key's order come from an index.
	Query string
	// KeyColumns are the columns, of the table or of the query's result,
	// that order the rows and record how far the backfill got. Required.
	KeyColumns []string
	// Key is a SQL expression over the row (its columns by name, or the
	// row as r) whose text is the event's key. Defaults to the key
	// columns, joined by ':' when there are several.
	Key string
	// Payload is a SQL expression over the row whose value is the event's
	// payload (text, json or bytea). Defaults to to_jsonb(r): the row as
	// a JSON object.
	Payload string
}

// identifier is a column name a backfill accepts unquoted.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// tableName is a table, optionally schema-qualified.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// Validate checks the source's form; the database checks the rest when
// the backfill starts.
func (s Source) Validate() error {
	switch {
	case s.Table == "" && strings.TrimSpace(s.Query) == "":
		return errors.New("heraldbackfill: Source: give a Table or a Query")
	case s.Table != "" && s.Query != "":
		return errors.New("heraldbackfill: Source: give a Table or a Query, not both")
	case s.Table != "" && !tableName.MatchString(s.Table):
		return fmt.Errorf("heraldbackfill: Source.Table %q is not a table name (letters, digits and _, optionally schema.table)", s.Table)
	case len(s.KeyColumns) == 0:
		return errors.New("heraldbackfill: Source.KeyColumns is required: the columns that order the rows and record progress")
	case len(s.KeyColumns) > 8:
		return errors.New("heraldbackfill: Source.KeyColumns: at most 8 columns")
	}
	seen := map[string]bool{}
	for _, c := range s.KeyColumns {
		if !identifier.MatchString(c) {
			return fmt.Errorf("heraldbackfill: Source.KeyColumns: %q is not a column name (letters, digits and _)", c)
		}
		if seen[strings.ToLower(c)] {
			return fmt.Errorf("heraldbackfill: Source.KeyColumns: %q is given twice", c)
		}
		seen[strings.ToLower(c)] = true
	}
	if s.Query != "" && strings.Contains(s.Query, ";") && strings.TrimRight(strings.TrimSpace(s.Query), ";") != strings.TrimSpace(s.Query) {
		return errors.New("heraldbackfill: Source.Query: give one SELECT, without a trailing semicolon")
	}
	return nil
}

// Fingerprint is what the record of a backfill keeps of its source and
// topic, to refuse a resume over another definition.
func (s Source) Fingerprint(topic string) string {
	return strings.Join([]string{"topic=" + topic, "table=" + s.Table, "query=" + strings.TrimSpace(s.Query),
		"key_columns=" + strings.Join(s.KeyColumns, ","), "key=" + s.Key, "payload=" + s.Payload}, "\n")
}

// Config configures a backfill. Name, Topic and Source are required.
type Config struct {
	// Name identifies the backfill: its progress is recorded under it, and
	// a run of the same name resumes where the last one stopped. It is the
	// value of every event's Herald-Backfill header.
	Name string
	// Topic is every event's topic.
	Topic string
	// Type is every event's type. Defaults to none.
	Type string
	// Source is the rows to backfill.
	Source Source
	// Map, when set, builds each row's event instead of the key and
	// payload expressions: it gets the row's values by column, and the
	// expressions' values; Topic defaults to Config.Topic. The
	// Herald-Backfill header is added to what it returns.
	Map func(Row) (herald.Message, error)
	// BatchSize is the rows of one batch, one transaction. Defaults to 500.
	BatchSize int
	// Rate caps the rows written per second; 0 means no cap. Defaults to 0.
	Rate float64
	// MaxBacklog pauses the backfill while the outbox holds more ready
	// events than this, so that live events are not starved behind it;
	// 0 means no bound. Defaults to 0.
	MaxBacklog int
	// BacklogPoll is how often a paused backfill reads the backlog
	// again: a count of at most MaxBacklog+1 rows through the ready
	// index, cheap enough to repeat often, so that the backfill resumes
	// as soon as the relay has caught up. Defaults to 50ms.
	BacklogPoll time.Duration
	// MaxPayloadBytes caps an event's payload. Defaults to 1 MiB.
	MaxPayloadBytes int
	// Restart forgets the backfill's recorded progress first, so that it
	// starts over from the first row. Defaults to false (resume).
	Restart bool
	// Logger gets the backfill's log lines (start, pauses, waits, end;
	// each batch at Debug). Defaults to a logger that discards.
	Logger *slog.Logger
	// Progress, when set, is called after each batch.
	Progress func(Report)
	// Clock paces the rate and the backlog's pauses. Defaults to the
	// system clock.
	Clock herald.Clock
}

// Report is a backfill's progress, after a batch.
type Report struct {
	// Rows is the rows backfilled over every run; RunRows this run's.
	Rows, RunRows int64
	// Total is the rows the source held when this run started, beyond
	// those of earlier runs (Rows - RunRows); 0 when unknown.
	Total int64
	// LastKey is the last row's key columns, as text.
	LastKey []string
	// Elapsed is this run's time so far.
	Elapsed time.Duration
	// Done says the source is exhausted.
	Done bool
}

// Summary is what a run did.
type Summary struct {
	Name string
	// Rows is the rows backfilled over every run, RunRows this run's,
	// Batches this run's transactions.
	Rows, RunRows int64
	Batches       int
	// LastKey is the key the next run resumes after.
	LastKey []string
	// Done says every row has its event; Stopped that the run's context
	// ended first (resume by running it again).
	Done, Stopped bool
	// Resumed says an earlier run had recorded progress.
	Resumed bool
	// Paused is the time spent waiting for the backlog to go under
	// MaxBacklog; Throttled the time spent keeping under Rate.
	Paused, Throttled time.Duration
	Elapsed           time.Duration
}

const (
	defaultBatchSize   = 500
	maxBatchSize       = 10000
	defaultBacklogPoll = 50 * time.Millisecond
	maxNameLen         = 200
)

func (c *Config) withDefaults() (Config, error) {
	if c == nil {
		return Config{}, errors.New("heraldbackfill: Config is nil")
	}
	cfg := *c
	switch {
	case strings.TrimSpace(cfg.Name) == "" || len(cfg.Name) > maxNameLen || strings.ContainsAny(cfg.Name, "\x00\r\n"):
		return cfg, fmt.Errorf("heraldbackfill: Config.Name is required: one line of at most %d bytes that names the backfill", maxNameLen)
	case cfg.Topic == "" && cfg.Map == nil:
		return cfg, errors.New("heraldbackfill: Config.Topic is required (or a Config.Map that sets each event's topic)")
	case cfg.BatchSize < 0 || cfg.BatchSize > maxBatchSize:
		return cfg, fmt.Errorf("heraldbackfill: Config.BatchSize %d is not between 1 and %d", cfg.BatchSize, maxBatchSize)
	case cfg.Rate < 0:
		return cfg, errors.New("heraldbackfill: Config.Rate must not be negative")
	case cfg.MaxBacklog < 0:
		return cfg, errors.New("heraldbackfill: Config.MaxBacklog must not be negative")
	case cfg.BacklogPoll < 0:
		return cfg, errors.New("heraldbackfill: Config.BacklogPoll must not be negative")
	case cfg.MaxPayloadBytes < 0:
		return cfg, errors.New("heraldbackfill: Config.MaxPayloadBytes must not be negative")
	}
	if err := cfg.Source.Validate(); err != nil {
		return cfg, err
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = defaultBatchSize
	}
	if cfg.BacklogPoll == 0 {
		cfg.BacklogPoll = defaultBacklogPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	return cfg, nil
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Backfill writes an event for each row of a source.
type Backfill struct {
	store Store
	cfg   Config
}

// New returns a backfill over a driver's store: a *heraldpg.Driver (the
// one driver that implements Store today).
func New(store any, cfg *Config) (*Backfill, error) {
	if store == nil {
		return nil, errors.New("heraldbackfill: New: store is nil")
	}
	s, ok := store.(Store)
	if !ok {
		return nil, fmt.Errorf("heraldbackfill: the store %T cannot run backfills: only PostgreSQL's (driver/heraldpg) can", store)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Backfill{store: s, cfg: c}, nil
}

func (b *Backfill) start() StartParams {
	return StartParams{Name: b.cfg.Name, Source: b.cfg.Source, Fingerprint: b.cfg.Source.Fingerprint(b.cfg.Topic)}
}

// Count returns the backfill's record and the rows it has yet to write
// (every row for a backfill not run before, or with Restart), writing
// nothing: the dry run.
func (b *Backfill) Count(ctx context.Context) (Progress, int64, error) {
	p := b.start()
	p.FromStart = b.cfg.Restart
	return b.store.BackfillCount(ctx, p)
}
