package herald

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// heartbeatExpiry is how many of its intervals a relay's row stays listed
// without a beat: a few lost beats (a slow database, a long pause of the
// process) do not hide a relay that runs.
const heartbeatExpiry = 10

// heartbeatTimeout bounds one beat, and the removal of the row when the
// relay stops: a database that does not answer delays neither the next
// beat nor Stop for long.
const heartbeatTimeout = 2 * time.Second

// heartbeatWarnEvery is the least time between two warnings of failing
// heartbeats: a database that refuses them for an hour logs sixty lines,
// not seven hundred.
const heartbeatWarnEvery = time.Minute

// heartbeat is what the relay keeps to describe itself in its beats.
type heartbeat struct {
	store     Heartbeats   // the Store's, nil when it has none or they are off
	started   time.Time    // by the relay's clock, set by Start
	lastClaim atomic.Int64 // unix nanoseconds, by the relay's clock, of the last claim that took events; 0 before

	// Used by the heartbeat loop only.
	beaten   bool      // a beat went through since Start
	failing  bool      // the last beat failed
	warnedAt time.Time // the last warning of a failing beat
}

// heartbeatsOf is the Store's Heartbeats, nil when it has none or the
// config turns them off.
func heartbeatsOf(c RelayConfig) Heartbeats {
	if hb, ok := c.Store.(Heartbeats); ok && c.HeartbeatInterval > 0 {
		return hb
	}
	return nil
}

// startHeartbeats starts the loop that beats at once and then every
// HeartbeatInterval, when the Store takes heartbeats.
func (r *Relay) startHeartbeats(ctx context.Context) {
	if r.hb.store == nil {
		return
	}
	r.hb.started = r.cfg.Clock.Now()
	r.loops.Add(1)
	go func() { defer r.loops.Done(); r.every(ctx, r.cfg.HeartbeatInterval, r.beat) }()
}

// beat writes the relay's row. It runs to its own short timeout even when
// Stop is called meanwhile, so that the removal of the row, which comes
// after, is never overtaken by a beat still on its way.
func (r *Relay) beat(ctx context.Context) {
	h := &r.hb
	now := r.cfg.Clock.Now()
	b := RelayBeat{
		Owner: r.cfg.Owner, Version: moduleVersion(), First: !h.beaten,
		Running: now.Sub(h.started), SinceClaim: -1,
		Leased: r.inFlight.Load(), Published: r.stats.published.Load(),
		Expiry: heartbeatExpiry * r.cfg.HeartbeatInterval,
	}
	if at := h.lastClaim.Load(); at != 0 {
		b.SinceClaim = max(now.Sub(time.Unix(0, at)), 0)
	}
	beatCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(heartbeatTimeout, r.cfg.HeartbeatInterval))
	err := h.store.Beat(beatCtx, b)
	cancel()
	switch {
	case err == nil:
		if h.failing {
			r.log.Debug("heartbeat written again")
		}
		h.beaten, h.failing = true, false
	case !h.failing || now.Sub(h.warnedAt) >= heartbeatWarnEvery:
		r.log.Warn("writing the relay's heartbeat failed; relaying goes on, but herald status and the admin page do not list this relay",
			"error", Scrub(err.Error()))
		h.failing, h.warnedAt = true, now
	}
}

// noteClaim records when a claim took events, for the heartbeat.
func (r *Relay) noteClaim(at time.Time) { r.hb.lastClaim.Store(at.UnixNano()) }

// gone removes the relay's row, once its loops have returned: no beat can
// write it again.
func (r *Relay) gone(ctx context.Context) {
	if r.hb.store == nil {
		return
	}
	goneCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), heartbeatTimeout)
	defer cancel()
	if err := r.hb.store.Gone(goneCtx, r.cfg.Owner); err != nil {
		r.log.Warn("removing the relay's heartbeat failed; it stays listed until it expires",
			"expires_in", heartbeatExpiry*r.cfg.HeartbeatInterval, "error", Scrub(err.Error()))
	}
}

// modulePath is Herald's module, whose version the heartbeats carry.
const modulePath = "github.com/herald-outbox/herald"

// moduleVersion is the version of Herald the running binary holds: a tag
// such as v0.3.0, "(devel)" when built from a checkout, "unknown" without
// build information.
var moduleVersion = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return versionOf(bi)
})

// versionOf finds Herald's version in a binary's build information: the
// main module's when the binary is Herald's own (the herald daemon),
// otherwise the dependency's.
func versionOf(bi *debug.BuildInfo) string {
	if bi.Main.Path == modulePath && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, m := range bi.Deps {
		if m.Path != modulePath {
			continue
		}
		switch {
		case m.Replace != nil && m.Replace.Version != "":
			return m.Replace.Version
		case m.Replace != nil: // a directory on the build machine, not named here
			return m.Version + " (replaced)"
		}
		return m.Version
	}
	return "unknown"
}
