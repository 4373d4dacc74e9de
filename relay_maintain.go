package herald

import (
	"context"
	"time"
)

// every runs fn at once and then every interval until ctx ends.
func (r *Relay) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	for {
		fn(ctx)
		select {
		case <-r.cfg.Clock.After(interval):
		case <-ctx.Done():
			return
		}
	}
}

// rescue returns rows whose lease expired (their relay died or stalled) to
// ready, in batches until none is left.
func (r *Relay) rescue(ctx context.Context) {
	const limit = 1000
	for ctx.Err() == nil {
		n, err := r.cfg.Store.RescueExpired(ctx, limit)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("rescuing expired leases failed", "error", Scrub(err.Error()))
			}
			return
		}
		if n > 0 {
			r.stats.rescued.Add(int64(n))
			if h := r.hooks.rescued; h != nil {
				h.Rescued(n)
			}
			r.log.Info("lease rescued", "rows", n)
		}
		if n < limit {
			return
		}
	}
}

// cleanup deletes published rows past retention, CleanupBatchSize rows per
// statement so that no statement holds locks for long.
func (r *Relay) cleanup(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.cfg.Store.DeletePublished(ctx, r.cfg.Retention, r.cfg.CleanupBatchSize)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("retention cleanup failed", "error", Scrub(err.Error()))
			}
			return
		}
		r.stats.deleted.Add(int64(n))
		if n > 0 {
			r.log.Debug("retention deleted published rows", "rows", n)
		}
		if n < r.cfg.CleanupBatchSize {
			return
		}
	}
}
