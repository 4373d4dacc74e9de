package herald

import "time"

// Clock is the relay's source of time: when it is, and waiting. Leases,
// backoff and polling all read it, so a test can move time forward instead
// of sleeping. Contexts given to the Store and the Publisher still end by
// the real clock, after the durations the relay computes from this one.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// systemClock is the real time.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
