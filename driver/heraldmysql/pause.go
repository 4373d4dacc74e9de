package heraldmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Pauses implements herald.Store and heraldadmin.Admin.
func (d *Driver) Pauses(ctx context.Context) ([]herald.Pause, error) {
	var out []herald.Pause
	err := collect(ctx, d.db, d.q.pauses, nil, func(rows *sql.Rows) error {
		var (
			p              herald.Pause
			kind           string
			since, resumed datetime
		)
		if err := rows.Scan(&kind, &p.Name, &p.Paused, &p.Reason, &p.By, &since, &resumed); err != nil {
			return err
		}
		p.Kind, p.Since, p.Resumed = herald.PauseKind(kind), since.time(), resumed.time()
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: reading pauses: %w", err)
	}
	return out, nil
}

// ReadyTopics implements herald.Store: one probe of the key index per
// topic.
func (d *Driver) ReadyTopics(ctx context.Context) ([]string, error) {
	var (
		out  []string
		last string
	)
	for {
		var topic string
		err := d.db.QueryRowContext(ctx, d.q.nextTopic, last).Scan(&topic)
		if errors.Is(err, sql.ErrNoRows) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("heraldmysql: reading the topics with ready events: %w", err)
		}
		out, last = append(out, topic), topic
	}
}

// Pause implements heraldadmin.Admin.
func (d *Driver) Pause(ctx context.Context, p heraldadmin.PauseParams) error {
	if err := sqlstore.CheckPause(p.Kind, p.Name, p.Reason, p.By); err != nil {
		return fmt.Errorf("heraldmysql: %w", err)
	}
	if _, err := d.execTx(ctx, d.q.pause, string(p.Kind), p.Name, p.Reason, p.By); err != nil {
		return fmt.Errorf("heraldmysql: pausing %s %q: %w", p.Kind, p.Name, err)
	}
	return nil
}

// Resume implements heraldadmin.Admin. The row changed only if a pause was
// in force (go-sql-driver counts changed rows, not matched ones, and the
// statement matches only a pause in force anyway).
func (d *Driver) Resume(ctx context.Context, kind herald.PauseKind, name string) (bool, error) {
	if err := sqlstore.CheckPause(kind, name); err != nil {
		return false, fmt.Errorf("heraldmysql: %w", err)
	}
	n, err := d.execTx(ctx, d.q.resume, string(kind), name)
	if err != nil {
		return false, fmt.Errorf("heraldmysql: resuming %s %q: %w", kind, name, err)
	}
	return n > 0, nil
}
