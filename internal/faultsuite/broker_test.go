package faultsuite_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// brokerLoad runs until the case stops it: a few thousand events.
var brokerLoad = load{writers: 4, keys: 100, perTx: 3, pace: 10 * time.Millisecond}

// The broker answers, but later than the relay's publish timeout: every
// message reaches the stream, and every PubAck comes too late. The relay
// must count the publishes as failed and send the events again (JetStream
// drops the copies by their Nats-Msg-Id), keep each key's order, and
// drain everything once the broker is fast again.
func TestSlowBrokerPastThePublishTimeout(t *testing.T) {
	testenv.Long(t)
	w := newWorld(t)
	px := testenv.NewProxy(t, w.natsAddr())
	const name = "fault-slow"
	// The client's default pings: the connection stays up, only slow.
	r := w.startRelay(t, name, via{nats: px.Addr(), natsOpts: []nats.Option{
		nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
	}})
	watch := watchRelayTx(t, w.pool, name)
	stop := w.startLoad(t, brokerLoad)

	require.Eventually(t, func() bool { return w.published(t) >= 300 }, time.Minute, time.Millisecond)
	px.Latency(publishTimeout * 3 / 2)
	require.Eventually(t, func() bool { return r.obs.failed.Load() >= 2*batchSize }, time.Minute, time.Millisecond,
		"no publish timed out behind the slow broker; relay log:\n%s", r)
	px.Heal()
	stop()

	w.verify(t, observedBound(r), logsOf(r))
	watch.check(t)
	require.Zero(t, r.relay.Stats().Dead)
}

// The broker stores what the relay publishes, but its answers (PubAcks,
// and the pongs that would tell the client the connection is alive) are
// dropped. The relay must treat the events as not delivered and publish
// them again once the connection is back: duplicates on the wire, each
// event once on the stream, and nothing lost.
func TestDroppedBrokerAcks(t *testing.T) {
	testenv.Long(t)
	w := newWorld(t)
	px := testenv.NewProxy(t, w.natsAddr())
	const name = "fault-acks"
	r := w.startRelay(t, name, via{nats: px.Addr()})
	watch := watchRelayTx(t, w.pool, name)
	stop := w.startLoad(t, brokerLoad)

	require.Eventually(t, func() bool { return w.published(t) >= 300 }, time.Minute, time.Millisecond)
	px.Drop(testenv.Downstream)
	// Messages are stored while their acks are lost: the stream runs ahead
	// of what the relay recorded as published.
	require.Eventually(t, func() bool {
		info, err := w.stream.Info(t.Context())
		return err == nil && r.obs.failed.Load() > 0 && int(info.State.Msgs) > w.published(t)
	}, time.Minute, time.Millisecond, "no publish lost its ack; relay log:\n%s", r)
	px.Heal()
	stop()

	out := w.verify(t, observedBound(r), logsOf(r))
	watch.check(t)
	require.Positive(t, out.duplicates, "events stored while their acks were dropped are published again")
	require.Zero(t, r.relay.Stats().Dead)
}

// The relay's connection to the broker is cut, and new connections are
// first refused (reset at once), then blackholed (accepted, never
// answered), as while a broker restarts behind a load balancer. The relay
// must pause for the outage without spending attempts, and publish
// everything once the broker takes connections again.
func TestBrokerConnectionsCutThenRefusedAndBlackholed(t *testing.T) {
	testenv.Long(t)
	w := newWorld(t)
	px := testenv.NewProxy(t, w.natsAddr())
	const name = "fault-refused"
	r := w.startRelay(t, name, via{nats: px.Addr()})
	watch := watchRelayTx(t, w.pool, name)
	stop := w.startLoad(t, brokerLoad)

	down := func() bool { return r.relay.Health().Destination != "" }
	for _, fault := range []func(){px.RefuseNew, px.BlackholeNew} {
		require.Eventually(t, func() bool { return w.published(t) >= 300 && !down() }, time.Minute, time.Millisecond,
			"the relay is not at work; its log:\n%s", r)
		fault()
		px.Reset()
		require.Eventually(t, down, time.Minute, time.Millisecond, "the relay did not notice the outage")
		// The client keeps dialing and gets nowhere.
		accepted := px.Accepted()
		require.Eventually(t, func() bool { return px.Accepted() >= accepted+2 }, time.Minute, time.Millisecond)
		px.Heal()
		before := w.published(t)
		require.Eventually(t, func() bool { return w.published(t) > before+batchSize }, time.Minute, time.Millisecond,
			"the relay did not publish again once the broker was back; its log:\n%s", r)
	}
	stop()

	w.verify(t, observedBound(r), logsOf(r))
	watch.check(t)
	require.Zero(t, r.relay.Stats().Dead)
}
