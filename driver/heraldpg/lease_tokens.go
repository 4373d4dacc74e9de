package heraldpg

import (
	"sync"
	"time"

	"github.com/herald-outbox/herald/internal/sqlstore"
)

// leaseOnlyClaims remembers which of this driver's claims hold leases and
// no rows, until their lease ends: their acknowledgement then skips its
// part for rows (publishHasRowsSQL). A claim it does not know of (made
// by another driver, or forgotten) is acknowledged with that part, which
// finds its rows by token: forgetting costs a few index probes, never a
// row left claimed.
type leaseOnlyClaims struct {
	mu     sync.Mutex
	tokens map[string]time.Time // token -> when its lease ends
	adds   int
}

// purgeEvery is how many claims are remembered between two sweeps of
// those whose lease ended.
const purgeEvery = 1024

func (c *leaseOnlyClaims) add(token string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens == nil {
		c.tokens = map[string]time.Time{}
	}
	c.tokens[token] = until
	if c.adds++; c.adds%purgeEvery == 0 {
		now := time.Now()
		for t, end := range c.tokens {
			if end.Before(now) {
				delete(c.tokens, t)
			}
		}
	}
}

// hasRows reports whether the claim of token may hold rows: true unless
// this driver made it with leases alone.
func (c *leaseOnlyClaims) hasRows(token string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, leasesOnly := c.tokens[token]
	return !leasesOnly
}

func (c *leaseOnlyClaims) forget(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tokens, token)
}

// claimedRows reports whether an ordered claim of leased keys took any
// event as a row: an event of a free key (keyless, or of an unordered
// topic or relay), or of a key of which it took fewer than leaseMin
// events, as claimKeysLeaseSQL decides. Counting what came back errs on
// the safe side only: an event the statement did not return (changed
// meanwhile) can make a leased key look like rows, never the reverse.
func claimedRows(claimed []sqlstore.ClaimedRow, topics, keys []string, free []bool, leaseMin int) bool {
	freeKey := make(map[[2]string]bool, len(keys))
	for i := range keys {
		freeKey[[2]string{topics[i], keys[i]}] = free[i]
	}
	perKey := make(map[[2]string]int, len(keys))
	for i := range claimed {
		k := [2]string{claimed[i].Topic, claimed[i].Key}
		if f, ok := freeKey[k]; !ok || f {
			return true
		}
		perKey[k]++
	}
	for _, n := range perKey {
		if n < leaseMin {
			return true
		}
	}
	return false
}
