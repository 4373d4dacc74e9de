package heraldcdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldspec"
)

// A PostgreSQL database that heraldspec parsed opens its Source through
// heraldspec.ParsedDatabase.OpenSource once this package is imported:
// the replication connection uses the database's DSN (its role needs the
// REPLICATION attribute) and the outbox table's names; the Config given
// there sets the rest (Slot, Publication, CreateSlot, BufferBytes, ...),
// its Logger defaulting to the database's.
func init() {
	heraldspec.RegisterSource(heraldspec.SourceDriver{Driver: "postgres", Open: openSpec})
}

// openSpec opens a Source on the outbox table of p, which o relays. It
// leaves the table's inserts as they are: herald.Relay.Start makes them
// streamed once it runs with this Source, which then holds its slot (one
// home for that order; NewSource refuses a table made streamed before any
// slot of it existed).
func openSpec(ctx context.Context, p *heraldspec.ParsedDatabase, o *heraldspec.Outbox, cfg any) (heraldspec.ChangeSource, error) {
	t, isPG := p.Target().(*heraldpg.DSNConfig)
	_, isDriver := o.Store.(*heraldpg.Driver)
	if !isPG || !isDriver {
		return nil, errors.New("heraldcdc: the database is not a PostgreSQL one opened by heraldspec")
	}
	var c Config
	if base, ok := cfg.(*Config); ok && base != nil {
		c = *base
	} else if cfg != nil {
		return nil, fmt.Errorf("heraldcdc: the source's Config is a %T, not a *heraldcdc.Config", cfg)
	}
	c.ConnString, c.Schema, c.Table = t.Pool.ConnString(), t.Config.Schema, t.Config.Table
	if c.Logger == nil {
		c.Logger = p.Log()
	}
	return NewSource(ctx, c)
}
