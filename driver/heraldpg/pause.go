package heraldpg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Pauses implements herald.Store and heraldadmin.Admin.
func (d *Driver) Pauses(ctx context.Context) ([]herald.Pause, error) {
	var out []herald.Pause
	err := d.db.query(ctx, d.q.pauses, nil, func(scan func(...any) error) error {
		var (
			p       herald.Pause
			kind    string
			resumed pgtype.Timestamptz
		)
		if err := scan(&kind, &p.Name, &p.Paused, &p.Reason, &p.By, &p.Since, &resumed); err != nil {
			return err
		}
		p.Kind = herald.PauseKind(kind)
		if resumed.Valid {
			p.Resumed = resumed.Time
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: reading pauses: %w", err)
	}
	return out, nil
}

// ReadyTopics implements herald.Store.
func (d *Driver) ReadyTopics(ctx context.Context) ([]string, error) {
	var out []string
	err := d.db.query(ctx, d.q.readyTopics, nil, func(scan func(...any) error) error {
		var t string
		if err := scan(&t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: reading the topics with ready events: %w", err)
	}
	return out, nil
}

// Pause implements heraldadmin.Admin.
func (d *Driver) Pause(ctx context.Context, p heraldadmin.PauseParams) error {
	if err := sqlstore.CheckPause(p.Kind, p.Name, p.Reason, p.By); err != nil {
		return fmt.Errorf("heraldpg: %w", err)
	}
	if _, err := d.db.exec(ctx, d.q.pause, string(p.Kind), p.Name, p.Reason, p.By); err != nil {
		return fmt.Errorf("heraldpg: pausing %s %q: %w", p.Kind, p.Name, err)
	}
	return nil
}

// Resume implements heraldadmin.Admin.
func (d *Driver) Resume(ctx context.Context, kind herald.PauseKind, name string) (bool, error) {
	if err := sqlstore.CheckPause(kind, name); err != nil {
		return false, fmt.Errorf("heraldpg: %w", err)
	}
	n, err := d.db.exec(ctx, d.q.resume, string(kind), name)
	if err != nil {
		return false, fmt.Errorf("heraldpg: resuming %s %q: %w", kind, name, err)
	}
	return n > 0, nil
}
