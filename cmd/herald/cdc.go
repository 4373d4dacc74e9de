package main

import (
	"context"
	"time"

	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// sourceFlags are herald relay's flags that choose where events come from:
// claimed from the table (poll), or read from PostgreSQL's write-ahead log
// (cdc).
type sourceFlags struct {
	source, slot, publication *string
	createSlot                *bool
	bufferBytes               *int
	standbyInterval           *time.Duration
}

// The range --cdc-buffer-bytes takes, and the shortest
// --cdc-standby-interval (heraldcdc's own floor).
const (
	minCDCBuffer, maxCDCBuffer = 64 << 10, 1 << 30
	minCDCStandbyInterval      = 10 * time.Millisecond
)

func addSourceFlags(f *flagSet) *sourceFlags {
	return &sourceFlags{
		source: f.String("source", "poll", "where events come from: `poll` claims them from the table; cdc reads them, in commit order, "+
			"from a logical replication slot (PostgreSQL with wal_level=logical, a role with REPLICATION) and writes only failures back to the table"),
		slot:        f.String("cdc-slot", "", "the logical replication slot of --source cdc (`name`); defaults to the table's name"),
		publication: f.String("cdc-publication", "", "the publication of --source cdc (`name`); defaults to the table's name"),
		createSlot: f.Bool("cdc-create-slot", "create the publication and the slot when they are missing: for the first start of --source cdc only "+
			"(a slot made later would skip what was committed before it)"),
		bufferBytes: f.Int("cdc-buffer-bytes", 16<<20, "with --source cdc, hold at most `N` bytes of events read from the slot and not yet published "+
			"(and as much in one batch); the stream stops reading while full, PostgreSQL waits (64 KiB to 1 GiB)"),
		standbyInterval: f.Duration("cdc-standby-interval", time.Second, "with --source cdc, how often a relay whose slot another relay streams "+
			"tries to take it over (`duration`, at least 10ms)"),
	}
}

// cdcSetup is a checked --source cdc.
type cdcSetup struct {
	slot, publication string
	createSlot        bool
	bufferBytes       int
	standbyInterval   time.Duration
}

// config checks the flags against the databases; nil means polling.
func (s *sourceFlags) config(inv *invocation, dbs []*database) (*cdcSetup, error) {
	label := inv.flags.label
	switch *s.source {
	case "poll":
		for _, name := range []string{"cdc-slot", "cdc-publication", "cdc-buffer-bytes", "cdc-standby-interval"} {
			if inv.flags.isSet(name) {
				return nil, usagef("%s is only used with %s cdc", label(name), label("source"))
			}
		}
		if *s.createSlot {
			return nil, usagef("%s is only used with %s cdc", label("cdc-create-slot"), label("source"))
		}
		return nil, nil
	case "cdc":
	default:
		return nil, usagef("%s: %q is not poll or cdc", label("source"), clean(*s.source))
	}
	for _, db := range dbs {
		if db.names == nil {
			return nil, usagef("%s cdc needs PostgreSQL: %s is not a postgres:// database", label("source"), db.where)
		}
	}
	for name, v := range map[string]string{"cdc-slot": *s.slot, "cdc-publication": *s.publication} {
		if v != "" && !sqlstore.Identifier.MatchString(v) {
			return nil, usagef("%s: %q must match %s", label(name), clean(v), sqlstore.Identifier)
		}
	}
	if *s.bufferBytes < minCDCBuffer || *s.bufferBytes > maxCDCBuffer {
		return nil, usagef("%s: %d is not between %d and %d", label("cdc-buffer-bytes"), *s.bufferBytes, minCDCBuffer, maxCDCBuffer)
	}
	if *s.standbyInterval < minCDCStandbyInterval {
		return nil, usagef("%s: %s is less than %s", label("cdc-standby-interval"), *s.standbyInterval, minCDCStandbyInterval)
	}
	return &cdcSetup{slot: *s.slot, publication: *s.publication, createSlot: *s.createSlot,
		bufferBytes: *s.bufferBytes, standbyInterval: *s.standbyInterval}, nil
}

// open checks the slot (creating it with --cdc-create-slot) and starts
// reading it. The table's inserts turn streamed as the relay starts
// (herald.Relay.Start, once this source holds the slot), and heraldcdc
// refuses to make a slot for a table made streamed before it: the order
// is the library's, as for any service that embeds the relay.
//
// A slot that another relay streams exists, so that order holds for a
// standby too: its source waits for the slot (heraldcdc.Source.Active)
// while its relay claims what the table holds, which is safe beside
// other relays. When the relay that streams stops, its last batch is done
// and confirmed before its source closes and releases the slot (fleet.stop),
// so the standby goes on from there and repeats nothing; one that is
// killed leaves its unconfirmed batches to the standby, whose repeats the
// brokers' dedup ids drop.
func (c *cdcSetup) open(ctx context.Context, d *dbRelay) (heraldspec.ChangeSource, error) {
	return d.db.spec.OpenSource(ctx, d.pool, &heraldcdc.Config{
		Slot: c.slot, Publication: c.publication, CreateSlot: c.createSlot, Logger: d.log,
		BufferBytes: c.bufferBytes, StandbyInterval: c.standbyInterval,
	})
}
