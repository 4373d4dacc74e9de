package herald

import "time"

// noteOutage records that the destination failed as a whole and returns how
// long to wait: doubling from 100ms up to OutageBackoffCap. Claims pause
// for that long, so an outage costs a few cheap retries, not a storm.
func (r *Relay) noteOutage(reason string) time.Duration {
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	if r.outageDelay == 0 {
		r.outageErr = reason
		r.outageDelay = min(100*time.Millisecond, r.cfg.OutageBackoffCap)
		r.log.Warn("destination unreachable; pausing claims", "error", reason)
	} else if r.cfg.Clock.Now().After(r.outageUntil) {
		r.outageDelay = min(r.outageDelay*2, r.cfg.OutageBackoffCap)
	}
	r.outageUntil = r.cfg.Clock.Now().Add(r.outageDelay)
	return r.outageDelay
}

// clearOutage ends an outage once a batch went through.
func (r *Relay) clearOutage() {
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	if r.outageDelay != 0 {
		r.log.Info("destination reachable again")
	}
	r.outageDelay = 0
	r.outageUntil = time.Time{}
}

// outageWait is how long claims still pause for an outage.
func (r *Relay) outageWait() time.Duration {
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	return r.outageUntil.Sub(r.cfg.Clock.Now())
}
