package heraldkafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// The kill tests run each relay as a child process, this test binary
// started again with killChildEnv set, which TestMain checks first. A child
// SIGKILLs itself the killNthEnv-th time it reaches the step killAtEnv
// names, so the kill lands at that exact point of a publish:
//
//   - "begun": a transaction begun, nothing produced (plain: before
//     Publish);
//   - "produced": every record of the batch and its marker acknowledged,
//     the commit not sent (plain: before Publish);
//   - "committed": the commit confirmed, Publish not returned, so the
//     database never hears of it (plain: Publish returned nil);
//   - "acked": the database recorded the batch as published.
const (
	killChildEnv   = "HERALD_KAFKA_KILL_CHILD" // the child's name
	killDSNEnv     = "HERALD_KAFKA_KILL_DSN"
	killSchemaEnv  = "HERALD_KAFKA_KILL_SCHEMA"
	killBrokersEnv = "HERALD_KAFKA_KILL_BROKERS"
	killTxIDEnv    = "HERALD_KAFKA_KILL_TXID" // "": the plain publisher
	killAtEnv      = "HERALD_KAFKA_KILL_AT"
	killNthEnv     = "HERALD_KAFKA_KILL_NTH"
)

var killSteps = []string{"begun", "produced", "committed", "acked"}

// killTopic is the events' topic: one partition, so that a read_committed
// consumer reads everything up to a sentinel.
const killTopic = "eos"

// runKillChildIfAsked runs a relay child until SIGTERM, and exits the
// process, when this process was started as one.
func runKillChildIfAsked() {
	name := os.Getenv(killChildEnv)
	if name == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	err := runKillChild(ctx, name)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kill child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// stepKiller SIGKILLs this process the nth time step is reached.
type stepKiller struct {
	step string
	nth  int64
	n    atomic.Int64
}

func (k *stepKiller) reached(step string) {
	if k == nil || step != k.step || k.n.Add(1) != k.nth {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // nothing more happens in this process
}

func (k *stepKiller) Acknowledged(a herald.Acknowledgement) {
	if len(a.Published) > 0 {
		k.reached("acked")
	}
}

func runKillChild(ctx context.Context, name string) error {
	pool, err := pgxpool.New(ctx, os.Getenv(killDSNEnv))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := heraldpg.New(pool, &heraldpg.Config{Schema: os.Getenv(killSchemaEnv)})
	if err != nil {
		return err
	}
	var killer *stepKiller
	if at := os.Getenv(killAtEnv); at != "" {
		nth, err := strconv.ParseInt(os.Getenv(killNthEnv), 10, 64)
		if err != nil {
			return err
		}
		killer = &stepKiller{step: at, nth: nth}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cl, err := heraldkafka.NewClient(strings.Split(os.Getenv(killBrokersEnv), ","))
	if err != nil {
		return err
	}
	defer cl.Close()
	cfg := &heraldkafka.Config{Logger: log}
	txid := os.Getenv(killTxIDEnv)
	if txid != "" {
		cfg.Transactional = &heraldkafka.Transactional{ID: txid, Clients: 2, Timeout: 2 * time.Second}
	}
	pub, err := heraldkafka.New(cl, cfg)
	if err != nil {
		return err
	}
	defer pub.Close()
	var wrapped herald.Publisher = pub
	if txid != "" {
		heraldkafka.SetHook(pub, killer.reached)
	} else {
		wrapped = herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			killer.reached("begun")
			killer.reached("produced")
			err := pub.Publish(ctx, batch)
			if err == nil {
				killer.reached("committed")
			}
			return err
		})
	}
	rc := &herald.RelayConfig{
		Store: store, Publisher: wrapped, Logger: log, Owner: name, BatchSize: 10,
		PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond,
		Lease: 2500 * time.Millisecond, PublishTimeout: 1500 * time.Millisecond, RescueInterval: 100 * time.Millisecond,
		OutageBackoffCap: 100 * time.Millisecond,
		Retry:            herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 1000, MaxAge: time.Hour},
	}
	if killer != nil {
		rc.Observer = killer
	}
	relay, err := herald.NewRelay(rc)
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return relay.Stop(sctx)
}

// killRun is what a run of relays killed at every step left in Kafka.
type killRun struct {
	kills   int
	events  int
	records int
	// perKey are the event ids of each key as a read_committed consumer
	// read them; want, in commit order.
	perKey, want map[string][]string
	logs         strings.Builder // every relay's log
	// Commits the broker refused (the transaction aborted under the
	// relay) and commits whose answer it lost.
	refused, lost int32
}

// runKills writes events to a PostgreSQL outbox and relays them to kfake
// with relays that SIGKILL themselves at each step of a publish in turn,
// rounds after rounds, with two transactional ids in turn (so a batch is
// rescued by a relay of the other id as well as by a restart of the same
// one), until at least kills relays were killed; then two relays that
// are not killed drain the rest, and the topic is read read_committed.
func runKills(t *testing.T, transactional bool, kills int) *killRun {
	ctx := t.Context()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, killTopic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	b := &bundle{cluster: cluster, addrs: cluster.ListenAddrs()}
	b.cl = b.client(t)

	var refused, lost atomic.Int32
	if transactional {
		breakCommits(t, cluster, b, &refused, &lost)
	}

	pool := testenv.PostgresPool(t)
	dsn := testenv.PostgresDSN(t)
	cfg := &heraldpg.Config{Schema: testenv.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	written := 0
	write := func(n int) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		msgs := make([]herald.Message, n)
		for i := range msgs {
			msgs[i] = herald.Message{Topic: killTopic, Key: "k" + strconv.Itoa(written%8), Payload: []byte(strconv.Itoa(written))}
			written++
		}
		require.NoError(t, w.WriteTx(ctx, tx, msgs...))
		require.NoError(t, tx.Commit(ctx))
	}

	var (
		mu   sync.Mutex
		logs []*testenv.LogBuffer
	)
	start := func(name, txid, at string, nth int) (*exec.Cmd, *testenv.LogBuffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		if !transactional {
			txid = ""
		}
		cmd.Env = append(os.Environ(), killChildEnv+"="+name, killDSNEnv+"="+dsn, killSchemaEnv+"="+cfg.Schema,
			killBrokersEnv+"="+strings.Join(b.addrs, ","), killTxIDEnv+"="+txid, killAtEnv+"="+at, killNthEnv+"="+strconv.Itoa(nth))
		logs1 := &testenv.LogBuffer{}
		cmd.Stdout, cmd.Stderr = logs1, logs1
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, logs1)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd, logs1
	}

	run := &killRun{}
	for round := 0; run.kills < kills; round++ {
		write(40)
		at, nth := killSteps[round%len(killSteps)], 1+round/len(killSteps)%3
		cmd, logs := start(fmt.Sprintf("killed-%d", round), fmt.Sprintf("relay-%d", round%2), at, nth)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "relay %d (kill at %s #%d) exited on its own:\n%s", round, at, nth, logs)
			status, ok := exit.Sys().(syscall.WaitStatus)
			require.True(t, ok && status.Signaled() && status.Signal() == syscall.SIGKILL,
				"relay %d (kill at %s #%d) ended with %v, not its SIGKILL:\n%s", round, at, nth, err, logs)
			run.kills++
		case <-time.After(60 * time.Second):
			t.Fatalf("relay %d never reached %s #%d:\n%s", round, at, nth, logs)
		}
	}

	// Two relays drain what the killed ones left, rescuing their leases.
	var survivors []*exec.Cmd
	for i := range 2 {
		cmd, _ := start(fmt.Sprintf("survivor-%d", i), fmt.Sprintf("relay-%d", i), "", 0)
		survivors = append(survivors, cmd)
	}
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+store.Table()+` WHERE state <> 'published'`).Scan(&left))
		return left == 0
	}, 120*time.Second, 20*time.Millisecond, "the relays did not publish every event")
	for _, cmd := range survivors {
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, cmd.Wait())
	}

	for _, l := range logs {
		run.logs.WriteString(l.String())
	}
	run.refused, run.lost = refused.Load(), lost.Load()
	run.events = written
	run.want = map[string][]string{}
	rows, err := pool.Query(ctx, `SELECT id::text, key FROM `+store.Table()+` ORDER BY seq`)
	require.NoError(t, err)
	for rows.Next() {
		var id, key string
		require.NoError(t, rows.Scan(&id, &key))
		run.want[key] = append(run.want[key], id)
	}
	require.NoError(t, rows.Err())
	run.perKey = map[string][]string{}
	for _, r := range b.readCommitted(t, killTopic) {
		run.records++
		run.perKey[string(r.Key)] = append(run.perKey[string(r.Key)], header(r, herald.HeaderID))
	}
	return run
}

// breakCommits makes the broker fail some transactions' commits: every
// fifth it refuses with INVALID_PRODUCER_EPOCH, as when the coordinator
// aborted the transaction (it timed out, or a newer producer fenced it),
// and leaves the transaction to the relay to abort; every seventh it
// commits, over another connection, and answers the relay's request with
// UNKNOWN_SERVER_ERROR, as when the answer is lost.
func breakCommits(t *testing.T, cluster *kfake.Cluster, b *bundle, refused, lost *atomic.Int32) {
	var (
		commits atomic.Int32
		mu      sync.Mutex
		relayed = map[int64]bool{} // producer ids whose commit is made over b.cl
	)
	cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		end := req.(*kmsg.EndTxnRequest)
		mu.Lock()
		passing := relayed[end.ProducerID]
		mu.Unlock()
		if !end.Commit || passing {
			return nil, nil, false
		}
		resp := end.ResponseKind().(*kmsg.EndTxnResponse)
		switch n := commits.Add(1); {
		case n%5 == 0:
			refused.Add(1)
			resp.ErrorCode = kerr.InvalidProducerEpoch.Code
			return resp, nil, true
		case n%7 == 0:
			mu.Lock()
			relayed[end.ProducerID] = true
			mu.Unlock()
			done := make(chan error, 1)
			go func() {
				_, err := b.cl.Request(context.WithoutCancel(t.Context()), end)
				done <- err
			}()
			var err error
			cluster.SleepControl(func() { err = <-done })
			mu.Lock()
			delete(relayed, end.ProducerID)
			mu.Unlock()
			if err == nil {
				lost.Add(1)
				resp.ErrorCode = kerr.UnknownServerError.Code
				return resp, nil, true
			}
			// Not committed over b.cl: the relay's request goes through.
		}
		return nil, nil, false
	})
}

// Relays killed at every step of publish, commit and acknowledgement, 24
// times, their batches rescued by another relay or by the same relay
// restarted, while the broker refuses some commits and loses the answer
// of others: a read_committed consumer reads every event exactly once,
// each key's events in commit order.
func TestTransactionalRelaysPublishExactlyOnceAcrossKills(t *testing.T) {
	testenv.Long(t)
	run := runKills(t, true, 24)
	require.GreaterOrEqual(t, run.kills, 24)
	require.Equal(t, run.events, run.records, "records read_committed against events written")
	require.Equal(t, run.want, run.perKey, "each key's events once, in commit order")
	// The kills after a commit left batches that the marker look-up kept
	// from being sent again (else the run proves little).
	require.Contains(t, run.logs.String(), "not sent again", "no rescued batch was found already published")
	require.Positive(t, run.refused, "no commit was refused")
	require.Positive(t, run.lost, "no commit's answer was lost")
	t.Logf("%d kills, %d commits refused, %d commits' answers lost, %d events, %d records",
		run.kills, run.refused, run.lost, run.events, run.records)
}

// The same run without Config.Transactional: the relays killed after
// Kafka acknowledged a batch and before the database heard of it publish
// it again, so the consumer reads duplicates (which is what the test
// above would see were the option not working). Nothing is lost.
func TestPlainRelaysPublishDuplicatesAcrossTheSameKills(t *testing.T) {
	testenv.Long(t)
	run := runKills(t, false, 24)
	require.Greater(t, run.records, run.events, "no duplicate: the kills did not land between publish and acknowledgement")
	for key, ids := range run.want {
		got := map[string]bool{}
		for _, id := range run.perKey[key] {
			got[id] = true
		}
		for _, id := range ids {
			require.True(t, got[id], "event %s of key %s lost", id, key)
		}
	}
	t.Logf("%d kills, %d events, %d records (%d duplicates)", run.kills, run.events, run.records, run.records-run.events)
}
