package faultsuite_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// Relay timings for every case: a short lease so that a relay cut off
// loses its claims within seconds, and a publish timeout a slow broker can
// exceed.
const (
	batchSize      = 50
	maxInFlight    = 4
	maxPerKey      = 10
	lease          = 3 * time.Second
	publishTimeout = time.Second
)

// relayConfig is the configuration of every relay of the suite, in process
// or not.
func relayConfig(store herald.Store, pub herald.Publisher, name string, log *slog.Logger) *herald.RelayConfig {
	return &herald.RelayConfig{
		Store: store, Publisher: pub, Owner: name, Logger: log,
		BatchSize:        batchSize,
		MaxInFlight:      maxInFlight,
		MaxPerKey:        maxPerKey,
		Lease:            lease,
		PublishTimeout:   publishTimeout,
		PollInterval:     2 * time.Millisecond,
		IdlePollInterval: 20 * time.Millisecond,
		RescueInterval:   100 * time.Millisecond,
		OutageBackoffCap: 100 * time.Millisecond,
		Retry:            herald.RetryPolicy{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond, MaxAttempts: 1000, MaxAge: time.Hour},
	}
}

// natsOptions are the relays' NATS client options: reconnect forever and
// fast, and notice within about a second a connection that stopped
// answering.
func natsOptions(name string) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.PingInterval(250 * time.Millisecond),
		nats.MaxPingsOutstanding(3),
		nats.Timeout(time.Second),
	}
}

// inproc is a relay running in the test's process.
type inproc struct {
	name  string
	relay *herald.Relay
	obs   *counter
	log   *testenv.LogBuffer
}

// via says how a relay reaches its servers: through a proxy (host:port)
// or, when empty, directly.
type via struct {
	pg, nats string // pg is the database's, PostgreSQL's or MySQL's
	// natsOpts replace natsOptions, for a case that needs the client's
	// defaults.
	natsOpts []nats.Option
}

// startRelay starts a relay named name (its owner and application_name)
// and stops it when the test ends.
func (w *world) startRelay(t *testing.T, name string, v via) *inproc {
	t.Helper()
	store := w.db.relayStore(t, name, v.pg)
	url := w.natsURL()
	if v.nats != "" {
		url = "nats://" + v.nats
	}
	opts := v.natsOpts
	if opts == nil {
		opts = natsOptions(name)
	}
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	r := &inproc{name: name, obs: &counter{}, log: &testenv.LogBuffer{}}
	log := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pub, err := heraldnats.New(nc, &heraldnats.Config{AckTimeout: 2 * publishTimeout, Logger: log})
	require.NoError(t, err)
	cfg := relayConfig(store, pub, name, log)
	cfg.Observer = r.obs
	r.relay, err = herald.NewRelay(cfg)
	require.NoError(t, err)
	require.NoError(t, r.relay.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, r.relay.Stop(ctx))
	})
	return r
}

func (r *inproc) String() string  { return r.log.String() }
func (r *inproc) logName() string { return r.name }

// counter is a relay's Observer: it counts what can lead to a duplicate.
type counter struct {
	failed    atomic.Int64 // events of a batch not recorded as published
	rescued   atomic.Int64 // rows this relay took back from an expired lease
	leaseLost atomic.Int64 // rows its acknowledgements found no longer theirs
}

// Acknowledged counts every failed event, held back ones included: when a
// publisher fails a batch as a whole (its connection is lost), the relay
// holds back the later events of a key behind the first one's failure,
// even those the broker had stored.
func (c *counter) Acknowledged(a herald.Acknowledgement) {
	c.failed.Add(int64(len(a.Failed)))
	c.leaseLost.Add(int64(a.LeaseLost))
}

func (c *counter) Rescued(n int) { c.rescued.Add(int64(n)) }

// observedBound is the duplicate bound of in-process relays: a duplicate
// is the resend of an event whose earlier hand-off to the publisher was
// not recorded as published, so there are at most as many as failed
// events the relays recorded, plus rows rescued from an expired lease
// (their relay may have published them without recording it).
func observedBound(relays ...*inproc) func() bound {
	return func() bound {
		var failed, rescued int64
		for _, r := range relays {
			failed += r.obs.failed.Load()
			rescued += r.obs.rescued.Load()
		}
		return bound{
			n:   int(failed + rescued),
			why: fmt.Sprintf("%d events not confirmed by the broker + %d rows rescued from an expired lease", failed, rescued),
		}
	}
}

// logsOf formats the relays' logs for a failure message.
func logsOf(relays ...*inproc) func() string {
	return func() string { return joinLogs(relays) }
}
