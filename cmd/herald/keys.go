package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/herald-outbox/herald/heraldadmin"
)

// keysBlockedJSON is the documented shape of `herald keys blocked --json`.
type keysBlockedJSON struct {
	// Keys has one entry per parked key, oldest first; never null.
	Keys []blockedKeyJSON `json:"keys"`
	More bool             `json:"more"` // more keys than --limit
}

type blockedKeyJSON struct {
	Topic string `json:"topic"`
	Key   string `json:"key"`
	// DeadEventID is the dead event that holds the key back.
	DeadEventID string `json:"dead_event_id"`
	// Waiting counts the key's ready events behind it.
	Waiting int64     `json:"waiting"`
	Since   time.Time `json:"since"`
}

func setupKeysBlocked(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	limit := f.LocalInt("limit", defaultListLimit, fmt.Sprintf("list at most `N` keys (1 to %d)", maxListLimit))
	asJSON := f.LocalBool("json", "print JSON instead of a table")
	return func(ctx context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		if err := checkListLimit(*limit); err != nil {
			return err
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		keys, err := driver.BlockedKeys(ctx, *limit+1)
		if err != nil {
			return err
		}
		more := len(keys) > *limit
		keys = keys[:min(len(keys), *limit)]
		if *asJSON {
			out := keysBlockedJSON{Keys: make([]blockedKeyJSON, 0, len(keys)), More: more}
			for _, k := range keys {
				out.Keys = append(out.Keys, blockedKeyJSON{Topic: k.Topic, Key: k.Key, DeadEventID: k.EventID,
					Waiting: k.Waiting, Since: k.Since.UTC()})
			}
			return writeJSON(inv.stdout, out)
		}
		printBlockedKeys(inv.stdout, keys, more)
		return nil
	}
}

func printBlockedKeys(w io.Writer, keys []heraldadmin.BlockedKey, more bool) {
	if len(keys) == 0 {
		fmt.Fprintln(w, "no blocked keys")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tKEY\tDEAD EVENT\tWAITING\tSINCE")
	for _, k := range keys {
		since := k.Since
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", truncate(clean(k.Topic), 40), truncate(clean(k.Key), 30),
			k.EventID, k.Waiting, fmtTime(&since))
	}
	tw.Flush()
	n := plural(len(keys), "blocked key")
	if more {
		fmt.Fprintf(w, "%s shown; there are more: raise --limit\n", n)
	} else {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w, "resume a key in order: herald dead requeue ID; or drop its dead event: herald dead discard --resume ID")
}

// parkedError explains a discard refused because it would resume keys.
func parkedError(err error) error {
	var pe *heraldadmin.ParkedError
	if !errors.As(err, &pe) {
		return err
	}
	k := pe.Keys[0]
	more := ""
	if len(pe.Keys) > 1 {
		more = fmt.Sprintf(" (and %s more)", plural(len(pe.Keys)-1, "key"))
	}
	return fmt.Errorf("dead event %s holds back key %q of topic %q (%s waiting)%s; nothing was discarded: "+
		"pass --resume to discard it and let the key go on, or requeue it to publish it in order",
		k.EventID, clean(k.Key), clean(k.Topic), plural(int(k.Waiting), "event"), more)
}
