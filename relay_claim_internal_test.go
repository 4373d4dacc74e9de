package herald

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stillClock is a Clock at one instant.
type stillClock struct{ now time.Time }

func (c stillClock) Now() time.Time                       { return c.now }
func (c stillClock) After(time.Duration) <-chan time.Time { return nil }

// After a claim that found less than a batch, the next one starts
// PollInterval after it started: an event committed meanwhile waits for
// the cadence, not for the claim's time on top of it. A claim slower than
// that is still followed by a quarter of PollInterval, the database's
// pause between claims.
func TestPollRestCountsFromTheClaimsStart(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	r := &Relay{cfg: RelayConfig{PollInterval: 8 * time.Millisecond, Clock: stillClock{now}}}
	for took, want := range map[time.Duration]time.Duration{
		0:                     8 * time.Millisecond,
		3 * time.Millisecond:  5 * time.Millisecond,
		6 * time.Millisecond:  2 * time.Millisecond,
		7 * time.Millisecond:  2 * time.Millisecond,
		20 * time.Millisecond: 2 * time.Millisecond,
	} {
		require.Equal(t, want, r.pollRest(now.Add(-took)), "after a claim of %s", took)
	}
}
