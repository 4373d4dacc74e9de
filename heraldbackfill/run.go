package heraldbackfill

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
)

// Run backfills until every row of the source has its event, or ctx ends.
// It stops between batches: a batch under way when ctx ends is finished
// (its transaction commits or rolls back whole), and the Summary says
// Stopped; running the backfill again resumes after its last key. An
// error leaves the record at the last batch that committed, so running
// it again resumes there too.
func (b *Backfill) Run(ctx context.Context) (Summary, error) {
	cfg, log := b.cfg, b.cfg.Logger
	began := cfg.Clock.Now()
	sum := Summary{Name: cfg.Name}
	if cfg.Restart {
		if err := b.store.BackfillReset(ctx, cfg.Name); err != nil {
			return sum, fmt.Errorf("heraldbackfill: restarting %q: %w", cfg.Name, err)
		}
	}
	prog, err := b.store.BackfillStart(ctx, b.start())
	if err != nil {
		return sum, err
	}
	sum.Rows, sum.LastKey, sum.Done, sum.Resumed = prog.Rows, prog.LastKey, prog.Done, prog.Rows > 0 || prog.LastKey != nil
	if prog.Done {
		log.Info("backfill already done", "backfill", cfg.Name, "rows", prog.Rows)
		return sum, nil
	}
	var total int64
	if cfg.Progress != nil {
		// The bar's total: the rows after the recorded key. Counting reads
		// them once more, which a log-only run does not need.
		if _, total, err = b.store.BackfillCount(ctx, b.start()); err != nil {
			return sum, err
		}
	}
	log.Info("backfill started", "backfill", cfg.Name, "topic", cfg.Topic, "source", sourceName(cfg.Source),
		"resumed_after", keyText(prog.LastKey), "rows_before", prog.Rows, "batch_size", cfg.BatchSize,
		"rate", cfg.Rate, "max_backlog", cfg.MaxBacklog)
	lim := newLimiter(cfg.Clock, cfg.Rate)
	params := b.batchParams()
	for !sum.Done {
		if ctx.Err() != nil {
			sum.Stopped = true
			break
		}
		paused, err := b.waitBacklog(ctx)
		sum.Paused += paused
		if err != nil {
			if ctx.Err() != nil {
				sum.Stopped = true
				break
			}
			return sum, err
		}
		throttled, ok := lim.wait(ctx, cfg.BatchSize)
		sum.Throttled += throttled
		if !ok {
			sum.Stopped = true
			break
		}
		// The batch runs to its end whatever ctx does: Ctrl-C stops the
		// backfill after it, not inside it.
		res, err := b.store.BackfillBatch(context.WithoutCancel(ctx), params)
		if err != nil {
			return sum, fmt.Errorf("heraldbackfill: %q after key %s: %w", cfg.Name, keyText(sum.LastKey), err)
		}
		lim.spent(res.Rows)
		sum.Batches++
		sum.RunRows += int64(res.Rows)
		sum.Rows, sum.LastKey, sum.Done = res.Progress.Rows, res.Progress.LastKey, res.Progress.Done
		sum.Elapsed = cfg.Clock.Now().Sub(began)
		log.Debug("backfill batch", "backfill", cfg.Name, "rows", res.Rows, "rows_done", sum.Rows, "last_key", keyText(sum.LastKey))
		if cfg.Progress != nil {
			cfg.Progress(Report{Rows: sum.Rows, RunRows: sum.RunRows, Total: total, LastKey: sum.LastKey,
				Elapsed: sum.Elapsed, Done: sum.Done})
		}
	}
	sum.Elapsed = cfg.Clock.Now().Sub(began)
	if sum.Stopped {
		log.Info("backfill stopped; run it again to resume", "backfill", cfg.Name, "rows", sum.Rows, "run_rows", sum.RunRows,
			"last_key", keyText(sum.LastKey))
		return sum, nil
	}
	log.Info("backfill done", "backfill", cfg.Name, "rows", sum.Rows, "run_rows", sum.RunRows, "batches", sum.Batches,
		"elapsed", sum.Elapsed.Round(time.Millisecond).String(), "paused", sum.Paused.Round(time.Millisecond).String())
	return sum, nil
}

// batchParams is every batch's work: the rows' events, built by Map or
// from the key and payload expressions.
func (b *Backfill) batchParams() BatchParams {
	cfg := b.cfg
	var waitLogged time.Time
	return BatchParams{
		Name: cfg.Name, Source: cfg.Source, Limit: cfg.BatchSize, WantValues: cfg.Map != nil,
		MaxPayloadBytes: cfg.MaxPayloadBytes,
		Messages: func(rows []Row) ([]herald.Message, error) {
			msgs := make([]herald.Message, len(rows))
			for i, r := range rows {
				m := herald.Message{Topic: cfg.Topic, Key: r.Key, Type: cfg.Type, Payload: r.Payload}
				if cfg.Map != nil {
					var err error
					if m, err = cfg.Map(r); err != nil {
						return nil, fmt.Errorf("Config.Map: row %d of the batch: %w", i, err)
					}
					if m.Topic == "" {
						m.Topic = cfg.Topic
					}
				}
				msgs[i] = m
			}
			return msgs, nil
		},
		Waiting: func(holders int, waited time.Duration) {
			// A transaction that holds the outbox table for long (an
			// idle session) stops the backfill: say so, every 10s.
			if waited >= 10*time.Second && time.Since(waitLogged) >= 10*time.Second {
				waitLogged = time.Now()
				cfg.Logger.Warn("backfill waiting for transactions that hold the outbox table to end", "backfill", cfg.Name,
					"transactions", holders, "waited", waited.Round(time.Second).String())
			}
		},
	}
}

// waitBacklog returns once the outbox's ready backlog is at most
// MaxBacklog (at once without one), with the time it waited.
func (b *Backfill) waitBacklog(ctx context.Context) (time.Duration, error) {
	cfg := b.cfg
	if cfg.MaxBacklog == 0 {
		return 0, nil
	}
	start := cfg.Clock.Now()
	logged := false
	for {
		n, err := b.store.ReadyBacklog(ctx, cfg.MaxBacklog+1)
		if err != nil {
			return cfg.Clock.Now().Sub(start), fmt.Errorf("heraldbackfill: reading the outbox's backlog: %w", err)
		}
		if n <= cfg.MaxBacklog {
			waited := cfg.Clock.Now().Sub(start)
			if logged {
				cfg.Logger.Info("backfill resumed: the backlog is under its bound", "backfill", cfg.Name,
					"max_backlog", cfg.MaxBacklog, "paused", waited.Round(time.Millisecond).String())
			}
			return waited, nil
		}
		if !logged {
			logged = true
			cfg.Logger.Info("backfill paused: the outbox's ready backlog is over its bound", "backfill", cfg.Name,
				"max_backlog", cfg.MaxBacklog)
		}
		select {
		case <-ctx.Done():
			return cfg.Clock.Now().Sub(start), ctx.Err()
		case <-cfg.Clock.After(cfg.BacklogPoll):
		}
	}
}

func sourceName(s Source) string {
	if s.Table != "" {
		return s.Table
	}
	return "query"
}

// keyText spells a key for logs and messages.
func keyText(k []string) string {
	if k == nil {
		return "(start)"
	}
	return strings.Join(k, ",")
}

// KeyText spells a recorded key as Run's logs do: the key columns' text,
// joined by commas, or (start) before the first batch.
func KeyText(k []string) string { return keyText(k) }
