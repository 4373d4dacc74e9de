package heraldsqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

func claim(t *testing.T, b *bundle, limit int) (string, []herald.Envelope) {
	t.Helper()
	token := herald.NewID()
	envs, err := b.driver.Claim(context.Background(), herald.ClaimParams{Token: token, Owner: "host/1", Limit: limit, Lease: time.Minute})
	require.NoError(t, err)
	return token, envs
}

func envIDs(envs []herald.Envelope) []string {
	ids := make([]string, len(envs))
	for i, e := range envs {
		ids[i] = e.ID
	}
	return ids
}

func TestStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UnorderedClaimTakesDueReadyRowsOldestFirstWithALease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "a", Headers: map[string]string{"X-A": "1"}},
			herald.Message{Topic: "b"}, herald.Message{Topic: "c"})
		b.write(t, herald.Message{Topic: "later", AvailableAt: time.Now().Add(time.Hour)})
		// An older available_at comes first, whatever the seq.
		b.exec(t, `UPDATE herald_outbox SET available_at = available_at - 1000000 WHERE id = ?`, ids[2])

		token := herald.NewID()
		envs, err := b.driver.Claim(ctx, herald.ClaimParams{Token: token, Owner: "host/1", Limit: 2, Lease: time.Minute, Unordered: true})
		require.NoError(t, err)
		require.Equal(t, []string{ids[0], ids[2]}, envIDs(envs), "returned in seq order")
		require.Less(t, envs[0].Seq, envs[1].Seq)
		require.Equal(t, 1, envs[0].Attempt)
		require.Equal(t, map[string]string{"X-A": "1"}, envs[0].Headers)
		ev := b.row(t, ids[0])
		require.Equal(t, heraldadmin.StateClaimed, ev.State)
		require.Equal(t, "host/1", ev.ClaimedBy)
		require.NotNil(t, ev.LeaseUntil)
		require.WithinDuration(t, time.Now().Add(time.Minute), *ev.LeaseUntil, 5*time.Second)
		require.Equal(t, 1, b.count(t, "claim_token = ? AND id = ?", token, ids[2]))

		_, envs = claim(t, b, 10)
		require.Equal(t, []string{ids[1]}, envIDs(envs), "claimed and future rows are not taken")
		_, envs = claim(t, b, 10)
		require.Empty(t, envs)
	})

	t.Run("CompletePublishesOnlyRowsItStillHolds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"}, herald.Message{Topic: "t"})
		token, _ := claim(t, b, 10)

		res, err := b.driver.Complete(ctx, herald.CompleteParams{Token: herald.NewID(), Published: ids})
		require.NoError(t, err)
		require.Zero(t, res.Published, "a stale token changes nothing")
		require.Equal(t, 2, b.count(t, "state = 'claimed'"))

		res, err = b.driver.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
		require.NoError(t, err)
		require.Equal(t, 2, res.Published)
		ev := b.row(t, ids[0])
		require.Equal(t, heraldadmin.StatePublished, ev.State)
		require.NotNil(t, ev.PublishedAt)
		require.Nil(t, ev.LeaseUntil)

		res, err = b.driver.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
		require.NoError(t, err)
		require.Zero(t, res.Published, "acknowledging twice changes nothing")
	})

	t.Run("CompleteWithFailuresRetriesKillsAndRefundsInOneStatement", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t,
			herald.Message{Topic: "ok"}, herald.Message{Topic: "retry"}, herald.Message{Topic: "permanent"},
			herald.Message{Topic: "outage"}, herald.Message{Topic: "spent"}, herald.Message{Topic: "old"},
			herald.Message{Topic: "old-outage"})
		b.exec(t, `UPDATE herald_outbox SET attempts = 2 WHERE topic = 'spent'`)
		b.exec(t, `UPDATE herald_outbox SET created_at = created_at - 7200000000 WHERE topic LIKE 'old%'`)
		token, envs := claim(t, b, 10)
		require.Len(t, envs, 7)
		before := time.Now()
		res, err := b.driver.Complete(ctx, herald.CompleteParams{
			Token:     token,
			Published: ids[:1],
			Failed: []herald.Failure{
				{ID: ids[1], Outcome: herald.OutcomeRetry, Error: "nack", Delay: 30 * time.Second},
				{ID: ids[2], Outcome: herald.OutcomeDead, Error: "too large"},
				{ID: ids[3], Outcome: herald.OutcomeOutage, Error: "unreachable", Delay: time.Second},
				{ID: ids[4], Outcome: herald.OutcomeDead, Error: "nack again"},
				{ID: ids[5], Outcome: herald.OutcomeDead, Error: "nack"},
				{ID: ids[6], Outcome: herald.OutcomeDead, Error: "unreachable"},
			},
		})
		require.NoError(t, err)
		require.Equal(t, 1, res.Published)
		require.ElementsMatch(t, ids[1:], res.Failed)

		retry := b.row(t, ids[1])
		require.Equal(t, heraldadmin.StateReady, retry.State)
		require.Equal(t, 1, retry.Attempt)
		require.Equal(t, "nack", retry.LastError)
		require.WithinDuration(t, before.Add(30*time.Second), retry.AvailableAt, 5*time.Second)
		require.Nil(t, retry.LeaseUntil)

		outage := b.row(t, ids[3])
		require.Equal(t, heraldadmin.StateReady, outage.State)
		require.Zero(t, outage.Attempt, "an outage refunds the attempt")

		for _, id := range []string{ids[2], ids[4], ids[5], ids[6]} {
			ev := b.row(t, id)
			require.Equal(t, heraldadmin.StateDead, ev.State, ev.Topic)
			require.NotNil(t, ev.DeadAt, ev.Topic)
			require.NotEmpty(t, ev.LastError, ev.Topic)
		}
		require.Equal(t, 3, b.row(t, ids[4]).Attempt, "attempts >= MaxAttempts")
	})

	t.Run("CompleteIsTokenCheckedWithFailuresToo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"}, herald.Message{Topic: "t"})
		token, _ := claim(t, b, 10)
		b.exec(t, `UPDATE herald_outbox SET state = 'ready', claim_token = NULL WHERE id = ?`, ids[1]) // rescued meanwhile
		res, err := b.driver.Complete(ctx, herald.CompleteParams{
			Token: token, Published: ids[:1], Failed: []herald.Failure{{ID: ids[1], Outcome: herald.OutcomeDead, Error: "x"}},
		})
		require.NoError(t, err)
		require.Equal(t, 1, res.Published)
		require.Empty(t, res.Failed)
		require.Equal(t, heraldadmin.StateReady, b.row(t, ids[1]).State)
	})

	t.Run("RescueReturnsOnlyExpiredLeases", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"}, herald.Message{Topic: "t"}, herald.Message{Topic: "t"})
		token, _ := claim(t, b, 10)
		b.exec(t, `UPDATE herald_outbox SET lease_until = lease_until - 3600000000 WHERE id <> ?`, ids[2])
		n, err := b.driver.RescueExpired(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, 1, n, "at most limit rows")
		n, err = b.driver.RescueExpired(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		ev := b.row(t, ids[0])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Equal(t, 1, ev.Attempt, "the lost attempt counts")
		require.Contains(t, ev.LastError, "lease expired: relay host/1")
		require.Equal(t, heraldadmin.StateClaimed, b.row(t, ids[2]).State)

		res, err := b.driver.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
		require.NoError(t, err)
		require.Equal(t, 1, res.Published, "the old relay changes only the row it still holds")
	})

	t.Run("NegativeLimitsAreRefusedNotUnlimited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.writeN(t, "t", 3, 3)
		_, err := b.driver.Claim(ctx, herald.ClaimParams{Token: herald.NewID(), Limit: -1, Lease: time.Minute})
		require.ErrorContains(t, err, "negative limit")
		_, err = b.driver.RescueExpired(ctx, -1)
		require.ErrorContains(t, err, "negative limit")
		_, err = b.driver.DeletePublished(ctx, 0, -1)
		require.ErrorContains(t, err, "negative limit")
		require.Equal(t, 3, b.count(t, "state = 'ready'"))
	})

	t.Run("DeletePublishedDeletesOnlyOldPublishedRowsInBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeN(t, "t", 5, 5)
		token, _ := claim(t, b, 4)
		_, err := b.driver.Complete(ctx, herald.CompleteParams{Token: token, Published: ids[:4]})
		require.NoError(t, err)
		b.exec(t, `UPDATE herald_outbox SET published_at = published_at - 7200000000 WHERE id IN (?, ?, ?)`, ids[0], ids[1], ids[2])
		n, err := b.driver.DeletePublished(ctx, time.Hour, 2)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = b.driver.DeletePublished(ctx, time.Hour, 2)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = b.driver.DeletePublished(ctx, time.Hour, 2)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 2, b.count(t, "true"), "a recent published row and a ready row stay")
	})
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// deadRows writes n events on topic and makes them dead.
	deadRows := func(t *testing.T, b *bundle, topic string, n int) []string {
		ids := b.writeN(t, topic, n, n)
		token, _ := claim(t, b, n)
		fails := make([]herald.Failure, n)
		for i, id := range ids {
			fails[i] = herald.Failure{ID: id, Outcome: herald.OutcomeDead, Error: "boom"}
		}
		res, err := b.driver.Complete(ctx, herald.CompleteParams{Token: token, Failed: fails})
		require.NoError(t, err)
		require.Len(t, res.Failed, n)
		return ids
	}

	t.Run("StatusCountsRowsPerTopicAndState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		deadRows(t, b, "dead", 2)
		b.writeN(t, "ready", 3, 3)
		b.exec(t, `UPDATE herald_outbox SET created_at = created_at - 60000000 WHERE topic = 'ready'`)
		st, err := b.driver.Status(ctx)
		require.NoError(t, err)
		require.Len(t, st.Topics, 2)
		require.Equal(t, "dead", st.Topics[0].Topic)
		require.Equal(t, heraldadmin.StateDead, st.Topics[0].State)
		require.EqualValues(t, 2, st.Topics[0].Count)
		require.Equal(t, heraldadmin.StateReady, st.Topics[1].State)
		require.EqualValues(t, 3, st.Topics[1].Count)
		require.InDelta(t, time.Minute.Seconds(), st.OldestPending.Seconds(), 5)
	})

	t.Run("ListAndGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dead := deadRows(t, b, "a", 3)
		deadB := deadRows(t, b, "b", 1)
		ready := b.write(t, herald.Message{Topic: "a"})

		rows, err := b.driver.ListEvents(ctx, heraldadmin.EventFilter{All: true})
		require.NoError(t, err)
		require.Len(t, rows, 4, "dead by default")
		rows, err = b.driver.ListEvents(ctx, heraldadmin.EventFilter{Topic: "a", Limit: 2})
		require.NoError(t, err)
		require.Equal(t, dead[:2], []string{rows[0].ID, rows[1].ID})
		require.Equal(t, "boom", rows[0].LastError)
		rows, err = b.driver.ListEvents(ctx, heraldadmin.EventFilter{IDs: append(deadB, ready...)})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		rows, err = b.driver.ListEvents(ctx, heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})
		require.NoError(t, err)
		require.Equal(t, ready[0], rows[0].ID)

		ev, err := b.driver.GetEvent(ctx, dead[0])
		require.NoError(t, err)
		require.Equal(t, heraldadmin.StateDead, ev.State)
		_, err = b.driver.GetEvent(ctx, herald.NewID())
		require.ErrorIs(t, err, heraldadmin.ErrNotFound)
		_, err = b.driver.GetEvent(ctx, "42")
		require.ErrorContains(t, err, "not an event id")
	})

	t.Run("FiltersMustSelectExactlyOneWay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, f := range []heraldadmin.EventFilter{
			{}, {All: true, Topic: "t"}, {IDs: []string{herald.NewID()}, All: true},
			{IDs: []string{"nope"}}, {All: true, State: "gone"},
		} {
			_, err := b.driver.ListEvents(ctx, f)
			require.Error(t, err, "%+v", f)
			if f.State != "" {
				continue // the dead-letter actions act on dead rows whatever State says
			}
			_, err = b.driver.RequeueDead(ctx, f)
			require.Error(t, err, "%+v", f)
			_, err = b.driver.DiscardDead(ctx, f)
			require.Error(t, err, "%+v", f)
		}
	})

	t.Run("RequeueResetsAttemptsAndDiscardDeletes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a := deadRows(t, b, "a", 2)
		deadRows(t, b, "b", 2)
		ready := b.write(t, herald.Message{Topic: "a"})

		n, err := b.driver.RequeueDead(ctx, heraldadmin.EventFilter{IDs: append(a[:1], ready...)})
		require.NoError(t, err)
		require.Equal(t, 1, n, "only dead rows are requeued")
		ev := b.row(t, a[0])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Zero(t, ev.Attempt)
		require.Nil(t, ev.DeadAt)
		require.WithinDuration(t, time.Now(), ev.AvailableAt, 5*time.Second)

		n, err = b.driver.DiscardDead(ctx, heraldadmin.EventFilter{Topic: "b"})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = b.driver.DiscardDead(ctx, heraldadmin.EventFilter{All: true})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 2, b.count(t, "true"), "ready rows are never discarded")
	})
}
