package heraldkafka_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// txPublisher is a transactional publisher over b's cluster with a short
// transaction timeout, closed when the test ends.
func (b *bundle) txPublisher(t testing.TB, id string) *heraldkafka.Publisher {
	t.Helper()
	p, err := heraldkafka.New(b.cl, &heraldkafka.Config{Transactional: &heraldkafka.Transactional{
		ID: id, Clients: 2, Timeout: 3 * time.Second,
	}})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// readCommitted reads topic (one partition) as read_committed up to a
// sentinel record produced behind everything else, outside any
// transaction: it is visible once every transaction before it ended, so
// the result is complete.
func (b *bundle) readCommitted(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sentinel := herald.NewID()
	require.NoError(t, b.cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(sentinel),
		Headers: []kgo.RecordHeader{{Key: "sentinel", Value: []byte(sentinel)}}}).FirstErr())
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer cons.Close()
	var recs []*kgo.Record
	for {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "the sentinel did not arrive")
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, p, err) })
		for _, r := range fs.Records() {
			switch {
			case string(r.Value) == sentinel:
				return recs
			case header(r, "sentinel") == "": // an earlier read's sentinel
				recs = append(recs, r)
			}
		}
	}
}

func TestTransactional(t *testing.T) {
	t.Parallel()

	t.Run("PublishesABatchOnceForReadCommittedConsumers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.txPublisher(t, "once")
		batch := make([]herald.Envelope, 6)
		for i := range batch {
			batch[i] = keyed("orders", fmt.Sprintf("k%d", i%2), fmt.Sprint(i))
		}
		require.NoError(t, p.Publish(t.Context(), batch))
		got := b.readCommitted(t, "orders")
		require.Equal(t, idsOf(batch), ids(got), "every event once, in batch order")
		for _, r := range got {
			require.Equal(t, "orders", r.Topic)
		}
	})

	t.Run("DoesNotPublishAgainWhatAnEarlierAttemptCommitted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.txPublisher(t, "first")
		batch := []herald.Envelope{keyed("orders", "a", "1"), keyed("orders", "a", "2")}
		require.NoError(t, first.Publish(t.Context(), batch))
		// The relay died before the database heard of it: another relay
		// claims the rows again, with the next attempt, and one new event.
		again := []herald.Envelope{batch[0], batch[1], keyed("orders", "a", "3")}
		for i := range again[:2] {
			again[i].Attempt = 2
		}
		second := b.txPublisher(t, "second")
		require.NoError(t, second.Publish(t.Context(), again))
		require.Equal(t, idsOf(again), ids(b.readCommitted(t, "orders")))
	})

	t.Run("ALookUpWaitsForATransactionStillOpen", func(t *testing.T) {
		// Relay A has produced a batch and its marker and not committed
		// yet when relay B, rescuing the batch, looks it up: B's
		// read_committed fetches of the marker topic come back empty
		// until A's commit, and B then finds the events published.
		t.Parallel()
		b := setup(t)
		a := b.txPublisher(t, "a")
		// B's client tells when a fetch answer came back: A's commit
		// waits for the first, so B's look-up saw A's transaction open.
		fetched := make(chan struct{}, 1)
		rescuer, err := heraldkafka.New(b.client(t, kgo.WithHooks(fetchAnswered(fetched))),
			&heraldkafka.Config{Transactional: &heraldkafka.Transactional{ID: "b", Clients: 1, Timeout: 3 * time.Second}})
		require.NoError(t, err)
		t.Cleanup(rescuer.Close)
		batch := []herald.Envelope{keyed("orders", "a", "1"), keyed("orders", "a", "2")}
		again := slices.Clone(batch)
		for i := range again {
			again[i].Attempt = 2
		}
		rescued := make(chan error, 1)
		heraldkafka.SetHook(a, func(step string) {
			if step != "produced" {
				return
			}
			go func() { rescued <- rescuer.Publish(context.WithoutCancel(t.Context()), again) }()
			<-fetched // B is reading the markers while A's transaction is open
		})
		require.NoError(t, a.Publish(t.Context(), batch))
		require.NoError(t, <-rescued)
		require.Equal(t, idsOf(batch), ids(b.readCommitted(t, "orders")))
	})

	t.Run("WithoutTheAttemptItPublishesAgain", func(t *testing.T) {
		// The look-up is what keeps the duplicate out: the same second
		// publish, with the rows' attempt saying no claim came before,
		// sends them again (this is why the relay counts attempts).
		t.Parallel()
		b := setup(t)
		p := b.txPublisher(t, "again")
		batch := []herald.Envelope{keyed("orders", "a", "1")}
		require.NoError(t, p.Publish(t.Context(), batch))
		require.NoError(t, p.Publish(t.Context(), batch))
		require.Equal(t, []string{batch[0].ID, batch[0].ID}, ids(b.readCommitted(t, "orders")))
	})

	t.Run("ABrokerAbortingTheTransactionFailsTheBatchAndLosesNothing", func(t *testing.T) {
		// Between the records and the commit, the coordinator aborts the
		// transaction (here: a producer of the same transactional id
		// fences it, as a restarted relay would). The commit fails, the
		// marker topic says it did not land, and the events are retried;
		// the next attempt publishes them.
		t.Parallel()
		b := setup(t)
		p := b.txPublisher(t, "aborted")
		fenced := false
		heraldkafka.SetHook(p, func(step string) {
			if step != "produced" || fenced {
				return
			}
			fenced = true
			for i := range 2 { // whichever of the two clients holds it
				initProducerID(t, b, fmt.Sprintf("aborted-%d", i))
			}
		})
		batch := []herald.Envelope{keyed("orders", "a", "1"), keyed("orders", "a", "2"), keyed("orders", "b", "3")}
		err := p.Publish(t.Context(), batch)
		errs := batchErrors(t, err, len(batch))
		for _, e := range errs {
			require.ErrorContains(t, e, "not committed")
			require.False(t, herald.IsPermanent(e))
		}
		require.Empty(t, b.readCommitted(t, "orders"), "an aborted transaction's records are not read_committed")
		// The relay gives back the attempt of "2", held back behind "1".
		batch[0].Attempt, batch[2].Attempt = 2, 2
		require.NoError(t, p.Publish(t.Context(), batch))
		require.Equal(t, idsOf(batch), ids(b.readCommitted(t, "orders")))
	})

	t.Run("ACommitWhoseAnswerIsLostIsFoundCommitted", func(t *testing.T) {
		// The coordinator commits, and its answer is lost (here: the
		// commit is made over another connection while the relay's
		// request is answered UNKNOWN_SERVER_ERROR). Publish finds the
		// transaction's marker and reports the events published: none
		// waits on its attempt to be looked up, since the relay gives back
		// the attempt of events it holds back behind a failed one.
		t.Parallel()
		b := setup(t)
		p := b.txPublisher(t, "lost")
		var calls atomic.Int32
		b.cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			end := req.(*kmsg.EndTxnRequest)
			if !end.Commit || calls.Add(1) != 1 {
				return nil, nil, false // the commit over the other connection, and the abort after
			}
			b.cluster.KeepControl()
			committed := make(chan error, 1)
			go func() {
				_, err := b.cl.Request(context.WithoutCancel(t.Context()), end)
				committed <- err
			}()
			var cerr error
			b.cluster.SleepControl(func() { cerr = <-committed })
			require.NoError(t, cerr)
			resp := end.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true
		})
		batch := []herald.Envelope{keyed("orders", "a", "1"), keyed("orders", "a", "2")}
		require.NoError(t, p.Publish(t.Context(), batch))
		require.EqualValues(t, 2, calls.Load(), "the relay's commit, answered as lost, and the one over the other connection")
		require.Equal(t, idsOf(batch), ids(b.readCommitted(t, "orders")))
	})

	t.Run("AnUnreachableBrokerIsAnOutage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p, err := heraldkafka.New(b.cl, &heraldkafka.Config{DeliveryTimeout: 500 * time.Millisecond,
			Transactional: &heraldkafka.Transactional{ID: "down", Clients: 1, Timeout: 3 * time.Second}})
		require.NoError(t, err)
		t.Cleanup(p.Close)
		b.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			b.cluster.KeepControl()
			return nil, fmt.Errorf("dropped"), true
		})
		err = p.Publish(t.Context(), []herald.Envelope{keyed("orders", "a", "1")})
		require.Error(t, err)
		require.NotErrorAs(t, err, new(*herald.BatchError), "no broker answered: an outage, not a failed event")
	})

	t.Run("OpensFromAURLWithAnIDPerDestination", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pub, closePub, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "orders",
			URL: "kafka://" + b.addrs[0] + "?transactional=true"})
		require.NoError(t, err)
		defer closePub()
		batch := []herald.Envelope{keyed("orders", "a", "1")}
		require.NoError(t, pub.Publish(t.Context(), batch))
		require.Equal(t, idsOf(batch), ids(b.readCommitted(t, "orders")))
		host, err := os.Hostname()
		require.NoError(t, err)
		resp, err := kmsg.NewPtrListTransactionsRequest().RequestWith(t.Context(), b.cl)
		require.NoError(t, err)
		var txids []string
		for _, s := range resp.TransactionStates {
			txids = append(txids, s.TransactionalID)
		}
		require.Contains(t, txids, "herald-"+host+"-orders-0")
	})

	t.Run("RefusesTheMarkerTopicAsAnEventsTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.txPublisher(t, "marker")
		batch := []herald.Envelope{keyed(heraldkafka.DefaultMarkerTopic, "a", "1"), keyed(heraldkafka.DefaultMarkerTopic, "a", "2")}
		errs := batchErrors(t, p.Publish(t.Context(), batch), 2)
		require.True(t, herald.IsPermanent(errs[0]))
		require.ErrorIs(t, errs[1], herald.ErrHeldBack)
	})
}

// fetchAnswered is a client hook that signals each Fetch answer read,
// without blocking.
type fetchAnswered chan struct{}

func (c fetchAnswered) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Fetch) && err == nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// initProducerID asks for the producer id of transactional id id, as a
// new producer of it does, bumping its epoch: the transaction open under
// it is aborted, and its producer fenced.
func initProducerID(t testing.TB, b *bundle, id string) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = kmsg.StringPtr(id)
	req.TransactionTimeoutMillis = 3000
	req.ProducerID, req.ProducerEpoch = -1, -1
	resp, err := req.RequestWith(t.Context(), b.cl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))
}

func idsOf(batch []herald.Envelope) []string {
	out := make([]string, len(batch))
	for i := range batch {
		out[i] = batch[i].ID
	}
	return out
}
