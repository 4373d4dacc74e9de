package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// outbox is an opened outbox table: the relay's store and the operators'
// admin.
type outbox interface {
	herald.Store
	herald.Admin
}

// openOutbox connects to the database named by --db. Bad input is a usage
// error; an unreachable database is not. No error carries the password.
func openOutbox(ctx context.Context, c *common) (outbox, func(), error) {
	if c.db == "" {
		return nil, nil, usagef("--db is required (or HERALD_DB): a postgres://user:pass@host:5432/db DSN")
	}
	secret := passwordOf(c.db)
	switch schemeOf(c.db) {
	case "postgres", "postgresql":
	default:
		return nil, nil, usagef("--db: scheme %q is not supported: use postgres://", schemeOf(c.db))
	}
	cfg, err := pgxpool.ParseConfig(c.db)
	if err != nil {
		return nil, nil, usagef("--db: %s", scrubSecret(err.Error(), secret))
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "herald"
	}
	if err := (&heraldpg.Config{Schema: c.schema, Table: c.table}).Validate(); err != nil {
		return nil, nil, usagef("%v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--db: %s", scrubSecret(err.Error(), secret))
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("cannot reach the database at %s:%d/%s: %s",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, scrubSecret(err.Error(), secret))
	}
	store, err := heraldpg.New(pool, &heraldpg.Config{Schema: c.schema, Table: c.table})
	if err != nil {
		pool.Close()
		return nil, nil, usagef("%v", err)
	}
	return store, pool.Close, nil
}
