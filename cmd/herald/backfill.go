package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/herald-outbox/herald/heraldbackfill"
)

// backfillFlags are `herald backfill`'s own flags. None has an
// environment variable: a HERALD_TOPIC or HERALD_QUERY left in an
// environment must never change what a backfill writes.
type backfillFlags struct {
	name, topic, typ, from, query, keyExpr, payloadExpr *string
	keyColumns                                          *string
	batch, maxBacklog                                   *int
	rate                                                *float64
	dryRun, restart                                     *bool
}

func addBackfillFlags(f *flagSet) backfillFlags {
	b := backfillFlags{
		name: f.LocalString("name", "", "`NAME` of the backfill: its progress is recorded under it, a run of the same name resumes, "+
			"and every event carries it in the Herald-Backfill header (required)"),
		topic:       f.LocalString("topic", "", "every event's `topic` (required)"),
		typ:         f.LocalString("type", "", "every event's `type`"),
		from:        f.LocalString("from", "", "the `table` to backfill (schema.table), or give --query"),
		query:       f.LocalString("query", "", "a `SELECT` whose rows to backfill instead of a table's (read as a subquery, locked FOR SHARE)"),
		keyColumns:  f.LocalString("key-columns", "", "the `columns` (comma-separated) that order the rows and record progress: a unique, indexed key (required)"),
		keyExpr:     f.LocalString("key", "", "SQL `expression` over the row for the event's key (default: the key columns, joined by ':')"),
		payloadExpr: f.LocalString("payload", "", "SQL `expression` over the row for the event's payload, text, json or bytea (default: to_jsonb(r), the row as JSON)"),
		batch:       f.LocalInt("batch-size", 500, "rows of one batch, one transaction (at most 10000)"),
		maxBacklog:  f.LocalInt("max-backlog", 0, "pause while the outbox holds more than `N` ready events, so live events are not starved (0: no bound)"),
		dryRun:      f.LocalBool("dry-run", "count the rows the backfill would write events for, and write nothing"),
		restart:     f.LocalBool("restart", "forget the backfill's recorded progress and start over from the first row"),
	}
	b.rate = new(float64)
	f.fs.Float64Var(b.rate, "rate", 0, "write at most `N` rows a second (0: no cap)")
	return b
}

// config checks the flags and builds the library's Config.
func (b backfillFlags) config() (*heraldbackfill.Config, error) {
	switch {
	case strings.TrimSpace(*b.name) == "":
		return nil, usagef("--name is required: it records the backfill's progress, so that a second run resumes")
	case strings.TrimSpace(*b.topic) == "":
		return nil, usagef("--topic is required: every event's topic")
	case (*b.from == "") == (strings.TrimSpace(*b.query) == ""):
		return nil, usagef("give the rows to backfill: --from TABLE or --query 'SELECT ...', one of them")
	case strings.TrimSpace(*b.keyColumns) == "":
		return nil, usagef("--key-columns is required: the unique, indexed columns that order the rows (such as id)")
	case *b.batch < 1 || *b.batch > 10000:
		return nil, usagef("--batch-size: %d is not between 1 and 10000", *b.batch)
	case *b.rate < 0:
		return nil, usagef("--rate: %v is negative", *b.rate)
	case *b.maxBacklog < 0:
		return nil, usagef("--max-backlog: %d is negative", *b.maxBacklog)
	}
	var cols []string
	for _, c := range strings.Split(*b.keyColumns, ",") {
		cols = append(cols, strings.TrimSpace(c))
	}
	cfg := &heraldbackfill.Config{
		Name: strings.TrimSpace(*b.name), Topic: *b.topic, Type: *b.typ,
		Source:    heraldbackfill.Source{Table: *b.from, Query: *b.query, KeyColumns: cols, Key: *b.keyExpr, Payload: *b.payloadExpr},
		BatchSize: *b.batch, Rate: *b.rate, MaxBacklog: *b.maxBacklog, Restart: *b.restart,
	}
	if err := cfg.Source.Validate(); err != nil {
		return nil, usagef("%s", strings.NewReplacer("heraldbackfill: Source.Table", "--from", "heraldbackfill: Source.KeyColumns", "--key-columns",
			"heraldbackfill: Source.Query", "--query", "heraldbackfill: Source", "herald backfill").Replace(err.Error()))
	}
	return cfg, nil
}

func setupBackfill(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	b := addBackfillFlags(f)
	return func(ctx context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		log, err := d.logger(inv)
		if err != nil {
			return err
		}
		cfg, err := b.config()
		if err != nil {
			return err
		}
		db, err := d.parseDB(inv, false)
		if err != nil {
			return err
		}
		if db.names == nil {
			return usagef("--db: herald backfill runs on PostgreSQL only (the %s driver does not implement backfills yet)", db.spec.Driver)
		}
		pool, store, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		cfg.Logger = log
		if !*b.dryRun {
			cfg.Progress = newBackfillProgress(inv.stderr.w, log).report
		}
		bf, err := heraldbackfill.New(store, cfg)
		if err != nil {
			return err
		}
		if *b.dryRun {
			return backfillDryRun(ctx, inv.stdout, bf, cfg)
		}
		sum, err := bf.Run(ctx)
		if err != nil {
			if errors.Is(err, heraldbackfill.ErrSourceChanged) {
				return fmt.Errorf("%w\nrun it with --restart to start it over under the new definition, or give it another --name", err)
			}
			return fmt.Errorf("%w\nthe batches before it are recorded: run the same command again to resume", err)
		}
		switch {
		case sum.Stopped:
			fmt.Fprintf(inv.stdout, "backfill %s stopped after %d rows (%d this run), the last key %s; run the same command again to resume\n",
				sum.Name, sum.Rows, sum.RunRows, heraldbackfill.KeyText(sum.LastKey))
		case sum.RunRows == 0 && sum.Batches == 0:
			fmt.Fprintf(inv.stdout, "backfill %s was done already: %d rows; --restart runs it again from the first row\n", sum.Name, sum.Rows)
		default:
			fmt.Fprintf(inv.stdout, "backfill %s done: %d rows (%d this run) in %d batches, %s\n",
				sum.Name, sum.Rows, sum.RunRows, sum.Batches, sum.Elapsed.Round(time.Millisecond))
		}
		return nil
	}
}

// backfillDryRun prints what the backfill would do.
func backfillDryRun(ctx context.Context, w io.Writer, bf *heraldbackfill.Backfill, cfg *heraldbackfill.Config) error {
	prog, n, err := bf.Count(ctx)
	if err != nil {
		return err
	}
	from := "from the first row"
	if prog.LastKey != nil && !cfg.Restart {
		from = fmt.Sprintf("resuming after key %s (%d rows done)", heraldbackfill.KeyText(prog.LastKey), prog.Rows)
	}
	source := cfg.Source.Table
	if source == "" {
		source = "the query"
	}
	pace := ""
	if cfg.Rate > 0 {
		pace = fmt.Sprintf(", at most %v rows a second", cfg.Rate)
	}
	if cfg.MaxBacklog > 0 {
		pace += fmt.Sprintf(", paused while more than %d events are ready", cfg.MaxBacklog)
	}
	fmt.Fprintf(w, "dry run: backfill %s would write %d events to topic %s from %s, %s, in batches of %d%s; nothing written\n",
		cfg.Name, n, cfg.Topic, source, from, cfg.BatchSize, pace)
	return nil
}

// backfillProgress shows a backfill's progress: a bar redrawn in place
// when stderr is a terminal, otherwise a log line every progressEvery
// and at the end.
type backfillProgress struct {
	mu   sync.Mutex
	term io.Writer // nil unless stderr is a terminal
	log  *slog.Logger
	last time.Time
}

const progressEvery = 5 * time.Second

func newBackfillProgress(stderr io.Writer, log *slog.Logger) *backfillProgress {
	p := &backfillProgress{log: log}
	if f, ok := stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.term = f
		}
	}
	return p
}

func (p *backfillProgress) report(r heraldbackfill.Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rate := 0.0
	if s := r.Elapsed.Seconds(); s > 0 {
		rate = float64(r.RunRows) / s
	}
	if p.term != nil {
		fmt.Fprintf(p.term, "\r%s %d/%d rows  %.0f rows/s  %s ", bar(r.RunRows, r.Total, 30), r.RunRows, r.Total, rate, eta(r, rate))
		if r.Done {
			fmt.Fprintln(p.term)
		}
		return
	}
	if !r.Done && time.Since(p.last) < progressEvery {
		return
	}
	p.last = time.Now()
	p.log.Info("backfill progress", "rows", r.Rows, "run_rows", r.RunRows, "total", r.Total,
		"rows_per_second", int64(rate), "last_key", heraldbackfill.KeyText(r.LastKey))
}

func bar(done, total int64, width int) string {
	filled := width
	if total > 0 && done < total {
		filled = int(done * int64(width) / total)
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}

func eta(r heraldbackfill.Report, rate float64) string {
	if r.Done {
		return "done"
	}
	if rate <= 0 || r.Total <= r.RunRows {
		return ""
	}
	return "eta " + time.Duration(float64(r.Total-r.RunRows)/rate*float64(time.Second)).Round(time.Second).String()
}
