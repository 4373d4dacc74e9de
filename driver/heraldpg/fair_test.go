package heraldpg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// fairCase is one way of naming tenants: how a backlog tenant's events
// and another tenant's are told apart.
type fairCase struct {
	by string // Config.FairBy
	// message returns an event of tenant on key.
	message func(tenant, key string) herald.Message
	// setup prepares the table before Migrate (a column to add).
	column bool
}

var fairCases = []fairCase{
	{by: "topic", message: func(tenant, key string) herald.Message {
		return herald.Message{ID: uuid.NewString(), Topic: "t-" + tenant, Key: key, Payload: []byte("x")}
	}},
	{by: "header:tenant", message: func(tenant, key string) herald.Message {
		return herald.Message{ID: uuid.NewString(), Topic: "orders", Key: key, Payload: []byte("x"),
			Headers: map[string]string{"tenant": tenant}}
	}},
	{by: "column:tenant_id", column: true, message: func(tenant, key string) herald.Message {
		// The application would fill the column in its own SQL; the
		// test writes it from the header after the inserts.
		return herald.Message{ID: uuid.NewString(), Topic: "orders", Key: key, Payload: []byte("x"),
			Headers: map[string]string{"tenant": tenant}}
	}},
}

// fairOutbox migrates an outbox with c's fairness (none when off) and
// writes a backlog of tenant "a" (keys keys × perKey events, keys that
// sort first) and then one event of tenant "b" on a key that sorts last.
// It returns the driver and the id of b's event.
func fairOutbox(t *testing.T, c fairCase, on bool, keys, perKey int) (*pgtest.Outbox, *heraldpg.Driver, string) {
	t.Helper()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	cfg := heraldpg.Config{}
	o := pgtest.New(t, pool, cfg)
	if c.column {
		execSQL(t, o, `ALTER TABLE `+o.Store.Table()+` ADD COLUMN tenant_id text`)
	}
	var msgs []herald.Message
	for range perKey {
		for k := range keys {
			msgs = append(msgs, c.message("a", fmt.Sprintf("a%05d", k)))
		}
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, msgs...) }))
	other := c.message("b", "z")
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, other) }))
	if c.column {
		execSQL(t, o, `UPDATE `+o.Store.Table()+` SET tenant_id = headers->>'tenant'`)
	}
	if !on {
		return o, o.Store, other.ID
	}
	fair := *o.Config
	fair.FairBy = c.by
	d, err := heraldpg.New(pool, &fair)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx), "Migrate creates the index FairBy needs")
	require.NoError(t, d.Ping(ctx))
	return o, d, other.ID
}

func execSQL(t *testing.T, o *pgtest.Outbox, sql string) {
	t.Helper()
	_, err := o.Pool.Exec(t.Context(), sql)
	require.NoError(t, err, sql)
}

// claimsUntil claims batches of limit (ordered, or unordered), publishes
// each, and returns after how many claims the event id was claimed, or
// most+1 if it was not within most claims.
func claimsUntil(t *testing.T, d *heraldpg.Driver, id string, limit int, unordered bool, most int) int {
	t.Helper()
	ctx := t.Context()
	for n := 1; n <= most; n++ {
		token := uuid.NewString()
		batch, err := d.Claim(ctx, herald.ClaimParams{Token: token, Owner: "fair-test", Limit: limit,
			Lease: time.Minute, Unordered: unordered})
		require.NoError(t, err)
		require.NotEmpty(t, batch, "claim %d found nothing", n)
		ids := make([]string, len(batch))
		found := false
		for i, e := range batch {
			ids[i] = e.ID
			found = found || e.ID == id
		}
		_, err = d.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
		require.NoError(t, err)
		if found {
			return n
		}
	}
	return most + 1
}

// With one tenant's backlog of 400 keys ahead of it, another tenant's
// event is claimed by the first claim of 10 with fairness on, by topic, a
// header or a column, ordered or not; with it off, the claims take the
// backlog first and it is not claimed within 10 claims (the walk visits
// keys in order, the unordered claim takes the oldest first). A count of
// claims, not a time.
func TestFairClaimsReachAnotherTenantPastABacklog(t *testing.T) {
	t.Parallel()
	const (
		keys, perKey = 400, 2
		limit, bound = 10, 10
	)
	for _, c := range fairCases {
		for _, unordered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unordered=%v", c.by, unordered), func(t *testing.T) {
				t.Parallel()
				_, d, id := fairOutbox(t, c, true, keys, perKey)
				require.Equal(t, 1, claimsUntil(t, d, id, limit, unordered, bound),
					"fair: the other tenant's event waited behind the backlog")

				_, d, id = fairOutbox(t, c, false, keys, perKey)
				require.Greater(t, claimsUntil(t, d, id, limit, unordered, bound), bound,
					"not fair: the other tenant's event came early, so this test shows nothing")
			})
		}
	}
}

// A fair claim is work-conserving: what the other tenants leave of their
// share goes to the backlog, so a claim is full while the backlog lasts,
// and every event of every key is claimed once, in its key's order.
func TestFairClaimsFillTheBatchAndKeepEachKeysOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := fairCases[1]
	o, d, _ := fairOutbox(t, c, true, 300, 3)
	// Nine more tenants with a few events each.
	var msgs []herald.Message
	for tn := range 9 {
		for e := range 3 {
			msgs = append(msgs, c.message(fmt.Sprintf("t%d", tn), fmt.Sprintf("t%d-k%d", tn, e%2)))
		}
	}
	require.NoError(t, pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, msgs...) }))
	total := 300*3 + 1 + len(msgs)

	var seqs = map[[2]string]int64{}
	claimed := 0
	for claims := 0; claimed < total; claims++ {
		require.Less(t, claims, 200, "the backlog did not drain")
		token := uuid.NewString()
		batch, err := d.Claim(ctx, herald.ClaimParams{Token: token, Owner: "fair-test", Limit: 50, Lease: time.Minute})
		require.NoError(t, err)
		require.NotEmpty(t, batch)
		if claimed+50 <= total-len(msgs)-1 {
			require.Len(t, batch, 50, "a fair claim left room while the backlog waited")
		}
		ids := make([]string, len(batch))
		for i, e := range batch {
			ids[i] = e.ID
			k := [2]string{e.Headers["tenant"], e.Key}
			require.Greater(t, e.Seq, seqs[k], "key %v out of order", k)
			seqs[k] = e.Seq
		}
		claimed += len(batch)
		_, err = d.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
		require.NoError(t, err)
	}
	require.Equal(t, total, claimed)
}

// FairBy is checked before anything runs, and a relay whose index is
// missing is told how to create it.
func TestFairByIsCheckedAndItsIndexRequired(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"tenant", "header:", "header:Herald-Key", "column:Tenant", "column:topic", "header:a'b", "topics"} {
		_, err := heraldpg.New(testenv.PostgresPool(t), &heraldpg.Config{FairBy: bad})
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "FairBy", bad)
	}

	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	o := pgtest.New(t, pool, heraldpg.Config{})
	cfg := *o.Config
	cfg.FairBy = "header:tenant"
	d, err := heraldpg.New(pool, &cfg)
	require.NoError(t, err)
	err = d.Ping(ctx)
	require.ErrorContains(t, err, "herald migrate --fair-by header:tenant")
	_, err = d.Claim(ctx, herald.ClaimParams{Token: uuid.NewString(), Owner: "t", Limit: 10, Lease: time.Minute})
	require.ErrorContains(t, err, "is missing")

	cfg.FairBy = "column:tenant_id"
	d, err = heraldpg.New(pool, &cfg)
	require.NoError(t, err)
	require.ErrorContains(t, d.Migrate(ctx), "has no such column")

	// "topic" needs no index of its own.
	cfg.FairBy = "topic"
	d, err = heraldpg.New(pool, &cfg)
	require.NoError(t, err)
	require.NoError(t, d.Ping(ctx))
}

// Three relays fair by a header, on a plain and on a partitioned table,
// with a tenth of the publishes failing: every event of every tenant is
// published, and each key's events are first delivered in commit order.
func TestSeveralFairRelaysKeepEveryKeysOrderUnderFailures(t *testing.T) {
	t.Parallel()
	for _, partitioned := range []bool{false, true} {
		t.Run(fmt.Sprintf("partitioned=%v", partitioned), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := testenv.PostgresPool(t)
			cfg := heraldpg.Config{FairBy: "header:tenant"}
			if partitioned {
				cfg.Partition = &heraldpg.Partitioning{}
			}
			o := pgtest.New(t, pool, cfg) // Migrate makes the index, partitioned or not
			require.NoError(t, o.Store.Ping(ctx))

			// A backlog of one tenant over many keys, and a few events
			// of nineteen others, keys shared between tenants too.
			var msgs []herald.Message
			for i := range 3000 {
				msgs = append(msgs, fairCases[1].message("big", fmt.Sprintf("k%03d", i%300)))
			}
			for i := range 380 {
				tenant := fmt.Sprintf("t%02d", i%19)
				msgs = append(msgs, fairCases[1].message(tenant, fmt.Sprintf("%s-%d", tenant, i%3)))
				if i%5 == 0 {
					msgs = append(msgs, fairCases[1].message(tenant, fmt.Sprintf("k%03d", i)))
				}
			}
			seqOf := map[string]int{}
			for i, m := range msgs {
				seqOf[m.ID] = i
			}
			for i := 0; i < len(msgs); i += 500 {
				batch := msgs[i:min(i+500, len(msgs))]
				require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, batch...) }))
			}

			rec := heralddrivertest.NewRecorder()
			rec.Fail = func(e herald.Envelope, attempt int) error {
				if attempt == 1 && seqOf[e.ID]%10 == 3 {
					return errors.New("injected broker failure")
				}
				return nil
			}
			for i := range 3 {
				heralddrivertest.StartRelay(t, o.Driver.Open(t), rec, func(c *herald.RelayConfig) {
					c.Owner = fmt.Sprintf("fair-relay-%d", i)
					c.Lease = time.Minute
				})
			}
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				ids[i] = m.ID
			}
			rec.RequireAllDeliveredOnce(t, ids)
			last := map[string]int{}
			for _, e := range rec.Order() {
				if n, ok := last[e.Key]; ok {
					require.Greater(t, seqOf[e.ID], n, "key %s delivered out of commit order", e.Key)
				}
				last[e.Key] = seqOf[e.ID]
			}
		})
	}
}

// The fair lane's claims (herald.ClaimParams.SkipBacklogged) take events
// only of the values that are not backlogged: none before a full claim
// has found a backlog, then every value but the one a full claim left
// wanting more, and none again once full claims have drained it.
func TestFairLaneClaimsLeaveBackloggedValuesOut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := fairCases[0]
	o, d, _ := fairOutbox(t, c, true, 400, 2)
	claim := func(limit int, lane bool) []herald.Envelope {
		t.Helper()
		token := uuid.NewString()
		batch, err := d.Claim(ctx, herald.ClaimParams{Token: token, Owner: "fair-test", Limit: limit, Lease: time.Minute,
			SkipBacklogged: lane})
		require.NoError(t, err)
		ids := make([]string, len(batch))
		for i, e := range batch {
			ids[i] = e.ID
		}
		_, err = d.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
		require.NoError(t, err)
		return batch
	}
	write := func(tenants ...string) {
		t.Helper()
		var msgs []herald.Message
		for _, tn := range tenants {
			msgs = append(msgs, c.message(tn, tn+"-1"), c.message(tn, tn+"-2"))
		}
		require.NoError(t, pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, msgs...) }))
	}
	topics := func(batch []herald.Envelope) map[string]int {
		n := map[string]int{}
		for _, e := range batch {
			n[e.Topic]++
		}
		return n
	}

	require.Empty(t, claim(100, true), "the lane claimed before any claim found a backlog")
	require.Len(t, claim(50, false), 50, "the full claim")
	write("c", "d")
	require.Equal(t, map[string]int{"t-c": 2, "t-d": 2}, topics(claim(100, true)),
		"the lane takes every value's events but the backlogged one's")

	// Full claims drain the backlog; the last finds its keys run out.
	for n := 0; ; n++ {
		require.Less(t, n, 50, "the backlog did not drain")
		if len(claim(1000, false)) == 0 {
			break
		}
	}
	write("e")
	require.Empty(t, claim(100, true), "the lane claimed with no value backlogged")
	require.Equal(t, map[string]int{"t-e": 2}, topics(claim(100, false)))
}

// While a backlogged tenant's batches hold every publish slot of a fair
// relay (its publishes block), another tenant's events are published by
// the fair lane, each key in order; without the lane they would wait for
// a slot, and this test would time out.
func TestFairLanePublishesWhileBacklogBatchesHoldEverySlot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	o := pgtest.New(t, pool, heraldpg.Config{FairBy: "header:tenant"})
	c := fairCases[1]
	var backlog []herald.Message
	for i := range 2000 {
		backlog = append(backlog, c.message("big", fmt.Sprintf("big-%04d", i)))
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, backlog...) }))

	var (
		mu       sync.Mutex
		gate     = make(chan struct{})
		blocked  int
		trickled []herald.Envelope
		seen     = map[string]int{}
	)
	pub := herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
		for _, e := range batch {
			if e.Headers["tenant"] == "big" {
				mu.Lock()
				blocked++
				mu.Unlock()
				<-gate
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range batch {
			seen[e.ID]++
			if e.Headers["tenant"] != "big" {
				trickled = append(trickled, e)
			}
		}
		return nil
	})
	heralddrivertest.StartRelay(t, o.Store, pub, func(cfg *herald.RelayConfig) {
		cfg.BatchSize, cfg.MaxInFlight, cfg.ClaimConcurrency = 50, 2, 1
		cfg.Lease, cfg.PublishTimeout = 5*time.Minute, 2*time.Minute
	})
	t.Cleanup(func() { close(gate) }) // before the relay's Stop
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return blocked == 2 }, time.Minute, 5*time.Millisecond,
		"the backlog's batches did not take both slots")

	var trickle []herald.Message
	for i := range 30 {
		tenant := fmt.Sprintf("t%d", i%3)
		trickle = append(trickle, c.message(tenant, fmt.Sprintf("%s-k%d", tenant, i%2)))
	}
	for _, m := range trickle {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, m) }))
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(trickled) >= len(trickle) }, time.Minute,
		5*time.Millisecond, "the other tenants' events waited behind the backlog's batches")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, blocked, "a batch of the backlog was claimed beyond the two slots")
	order := map[string]int{}
	for i, m := range trickle {
		order[m.ID] = i
	}
	last := map[string]int{}
	for _, e := range trickled {
		require.Equal(t, 1, seen[e.ID], "event %s published twice", e.ID)
		if n, ok := last[e.Key]; ok {
			require.Greater(t, order[e.ID], n, "key %s out of commit order", e.Key)
		}
		last[e.Key] = order[e.ID]
	}
	require.Len(t, trickled, len(trickle))
}
