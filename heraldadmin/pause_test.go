package heraldadmin_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

func TestHeldByCountsTheReadyEventsEachPauseHolds(t *testing.T) {
	t.Parallel()
	pauses := []herald.Pause{
		{Kind: herald.PauseDestination, Name: "kafka", Paused: true},
		{Kind: herald.PauseTopic, Name: "orders.placed", Paused: true},
		{Kind: herald.PauseTopic, Name: "users", Paused: false}, // resumed: holds nothing
		{Kind: herald.PauseTopic, Name: "empty", Paused: true},
	}
	backlog := []heraldadmin.TopicBacklog{
		{Topic: "orders.placed", Ready: 5, Claimed: 2}, {Topic: "orders.paid", Ready: 3}, {Topic: "users", Ready: 9},
	}
	routes := func(topic string) string {
		if topic == "users" {
			return "webhook"
		}
		return "kafka"
	}
	held := heraldadmin.HeldBy(pauses, backlog, routes)
	require.Len(t, held, 3, "pauses in force only")
	require.Equal(t, int64(8), held[0].Waiting, "a destination holds the ready events of every topic routed to it")
	require.Equal(t, []string{"orders.paid", "orders.placed"}, held[0].Topics)
	require.Equal(t, int64(5), held[1].Waiting, "a topic holds its ready events, not the claimed ones")
	require.Zero(t, held[2].Waiting)

	held = heraldadmin.HeldBy(pauses, backlog, nil)
	require.Equal(t, int64(-1), held[0].Waiting, "without routes a destination's count is unknown")
	require.Equal(t, int64(5), held[1].Waiting)
}
