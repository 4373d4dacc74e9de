package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// setupSourcePoll is herald source poll: the way back from --source cdc.
//
// New rows become ready (claimed by any relay, the CDC relay's own claim
// loops included) from the moment the column's default changes. The ALTER
// TABLE that changes it waits for every transaction that inserted into
// the table to end, so every streamed row committed before the WAL
// position read right after it. Once the slot's confirmed position passes
// that position, the change stream has settled every streamed row: each
// was published or written back to the table. From then on a polling
// relay alone delivers everything, and the CDC relay can be stopped and
// its slot dropped.
func setupSourcePoll(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	slot := f.LocalString("cdc-slot", "", "the slot the CDC relay reads (`name`); defaults to the table's name")
	wait := f.LocalDuration("wait", 5*time.Minute, "wait up to this `duration` for the CDC relay to settle every streamed event")
	requeue := f.LocalString("requeue-since", "", "recovery from a slot dropped while no relay read it: make the streamed rows written since this `time` "+
		"(RFC 3339, as the refusal gives it) ready for polling and forget the slot's record, without waiting")
	return func(ctx context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		var since time.Time
		if *requeue != "" {
			t, err := time.Parse(time.RFC3339, strings.TrimSpace(*requeue))
			if err != nil {
				return usagef("--requeue-since: %q is not an RFC 3339 time such as 2026-11-27T06:00:00Z", clean(*requeue))
			}
			since = t
		}
		if *slot != "" && !sqlstore.Identifier.MatchString(*slot) {
			return usagef("--cdc-slot: %q must match %s", clean(*slot), sqlstore.Identifier)
		}
		if *wait <= 0 {
			return usagef("--wait: %s is not positive", *wait)
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		pg, ok := driver.(*heraldpg.Driver)
		q, isPG := pool.Client.(heraldcdc.Querier)
		if !ok || !isPG {
			return usagef("herald source poll needs PostgreSQL: only it has a change-data-capture source")
		}
		name := *slot
		if name == "" {
			name = *d.table
		}
		if !since.IsZero() {
			return recoverSlot(ctx, inv, pg, q, name, since)
		}
		if _, err := heraldcdc.SlotStatus(ctx, q, name); err != nil && !errors.Is(err, heraldcdc.ErrNoSlot) {
			return err
		} else if err != nil {
			// No slot, no change stream: nothing streamed can be waiting.
			if err := pg.StreamInserts(ctx, false); err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "new events are polled; replication slot %s does not exist, so no streamed event waits\n", name)
			return nil
		}
		if err := pg.StreamInserts(ctx, false); err != nil {
			return err
		}
		var raw string
		if err := q.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&raw); err != nil {
			return fmt.Errorf("reading the WAL position: %w", err)
		}
		switched, err := pglogrepl.ParseLSN(raw)
		if err != nil {
			return err
		}
		fmt.Fprintf(inv.stdout, "new events are polled from now on; waiting for the CDC relay on slot %s to confirm %s\n", name, switched)
		if err := awaitConfirmed(ctx, q, name, switched, *wait); err != nil {
			return err
		}
		fmt.Fprintf(inv.stdout, "every streamed event is settled: stop the CDC relay, relay with herald relay (polling), "+
			"then drop the slot: SELECT pg_drop_replication_slot('%s')\n", name)
		return nil
	}
}

// awaitConfirmed waits until slot's confirmed position reaches lsn. The
// stream's heartbeats move an idle slot every 10s, so an idle outbox
// takes at most that long.
func awaitConfirmed(ctx context.Context, q heraldcdc.Querier, slot string, lsn pglogrepl.LSN, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var confirmed *string
		err := q.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, slot).Scan(&confirmed)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("replication slot %s was dropped while waiting: streamed events it had not confirmed "+
				"may be unpublished; check herald status and the broker", slot)
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("reading slot %s: %w", slot, err)
		case err == nil && confirmed != nil:
			at, err := pglogrepl.ParseLSN(*confirmed)
			if err != nil {
				return err
			}
			if at >= lsn {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("slot %s has not confirmed %s after %s: is the CDC relay (herald relay --source cdc) running? "+
					"New events are polled already; run herald source poll again once it runs", slot, lsn, wait)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// recoverSlot is herald source poll --requeue-since: what the refusal of a
// dropped slot asks for. New events are polled, the streamed rows written
// since the time given become ready (some were published already: the
// broker's dedup ids absorb those within their window), and the slot's
// record is forgotten, so that a relay may create the slot anew.
func recoverSlot(ctx context.Context, inv *invocation, pg *heraldpg.Driver, q heraldcdc.Querier, slot string, since time.Time) error {
	info, err := heraldcdc.SlotStatus(ctx, q, slot)
	if err == nil && info.Active {
		return usagef("replication slot %s is being read by a relay: stop it before recovering (herald source poll without --requeue-since switches a running one)", slot)
	}
	if err != nil && !errors.Is(err, heraldcdc.ErrNoSlot) {
		return err
	}
	// New events polled and the streamed rows ready, so that no key's
	// new event is claimed before its older streamed ones are ready.
	n, err := pg.PollStreamed(ctx, since, 10000)
	if err != nil {
		return err
	}
	if _, err := pg.ForgetSlot(ctx, slot); err != nil {
		return err
	}
	fmt.Fprintf(inv.stdout, "new events are polled; %d streamed rows written since %s are ready for the polling relays; "+
		"slot %s's record is forgotten: once they are published, herald relay --source cdc --cdc-create-slot starts streaming again\n",
		n, since.UTC().Format(time.RFC3339), slot)
	return nil
}
