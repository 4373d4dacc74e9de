package heraldsqlite

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
	rows, err := d.db.QueryContext(ctx, d.q.pauses)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: reading pauses: %w", err)
	}
	defer rows.Close()
	var out []herald.Pause
	for rows.Next() {
		var (
			p              herald.Pause
			kind           string
			since, resumed micros
		)
		if err := rows.Scan(&kind, &p.Name, &p.Paused, &p.Reason, &p.By, &since, &resumed); err != nil {
			return nil, fmt.Errorf("heraldsqlite: reading pauses: %w", err)
		}
		p.Kind, p.Since, p.Resumed = herald.PauseKind(kind), since.time(), resumed.time()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: reading pauses: %w", err)
	}
	return out, nil
}

// ReadyTopics implements herald.Store: one probe of the key index per
// topic.
func (d *Driver) ReadyTopics(ctx context.Context) ([]string, error) {
	var (
		out  []string
		k    [2]string
		last string
	)
	for {
		err := d.db.QueryRowContext(ctx, d.q.nextTopic, last).Scan(&k[0], &k[1])
		if errors.Is(err, sql.ErrNoRows) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("heraldsqlite: reading the topics with ready events: %w", err)
		}
		out, last = append(out, k[0]), k[0]
	}
}

// Pause implements heraldadmin.Admin.
func (d *Driver) Pause(ctx context.Context, p heraldadmin.PauseParams) error {
	if err := sqlstore.CheckPause(p.Kind, p.Name, p.Reason, p.By); err != nil {
		return fmt.Errorf("heraldsqlite: %w", err)
	}
	if _, err := d.exec(ctx, d.q.pause, string(p.Kind), p.Name, p.Reason, p.By); err != nil {
		return fmt.Errorf("heraldsqlite: pausing %s %q: %w", p.Kind, p.Name, err)
	}
	return nil
}

// Resume implements heraldadmin.Admin.
func (d *Driver) Resume(ctx context.Context, kind herald.PauseKind, name string) (bool, error) {
	if err := sqlstore.CheckPause(kind, name); err != nil {
		return false, fmt.Errorf("heraldsqlite: %w", err)
	}
	n, err := d.exec(ctx, d.q.resume, string(kind), name)
	if err != nil {
		return false, fmt.Errorf("heraldsqlite: resuming %s %q: %w", kind, name, err)
	}
	return n > 0, nil
}
