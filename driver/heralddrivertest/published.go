package heralddrivertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// publishedCases check the listing a replay reads: published rows only,
// in publication order, narrowed by every filter field, paged without a
// row lost or repeated.
var publishedCases = []testCase{
	{"ListPublishedSelectsPublishedRowsInPublicationOrder", func(t *testing.T, o *Kit) {
		pub, ok := o.d.Admin.(heraldadmin.Published)
		require.True(t, ok, "the driver's Admin implements heraldadmin.Published")
		list := func(f heraldadmin.PublishedFilter) []heraldadmin.EventRow {
			t.Helper()
			rows, err := pub.ListPublished(o.ctx(), f)
			require.NoError(t, err)
			for _, r := range rows {
				require.Equal(t, heraldadmin.StatePublished, r.State)
			}
			return rows
		}
		typed := func(topic, key, typ string) herald.Message {
			m := keyed(topic, key)
			m.Type = typ
			return m
		}
		// Two batches, the first published two hours ago.
		early := o.put(heraldadmin.StatePublished,
			typed("orders", "k1", "OrderPlaced"), typed("orders", "k2", "OrderPlaced"),
			typed("orders", "k1", "OrderPaid"), typed("billing", "", "Invoiced"))
		o.backdate(2*time.Hour, early...)
		late := o.put(heraldadmin.StatePublished,
			typed("orders", "k1", "OrderShipped"), typed("billing", "", "Invoiced"))
		o.put(heraldadmin.StateDead, typed("orders", "k1", "Dead"))
		o.Write(typed("orders", "k1", "Waiting"))
		all := append(append([]string{}, early...), late...)

		require.Equal(t, all, rowIDs(list(heraldadmin.PublishedFilter{})), "published rows only, in publication order")
		require.Equal(t, []string{early[0], early[2], late[0]},
			rowIDs(list(heraldadmin.PublishedFilter{Topic: "orders", Key: ptr("k1")})), "a key's events in its order")
		require.Equal(t, []string{early[3], late[1]}, rowIDs(list(heraldadmin.PublishedFilter{Key: ptr("")})),
			"an empty key selects the events without one")
		require.Equal(t, []string{early[0], early[1]}, rowIDs(list(heraldadmin.PublishedFilter{Type: "OrderPlaced"})))
		require.Equal(t, []string{early[1], late[1]}, rowIDs(list(heraldadmin.PublishedFilter{IDs: []string{late[1], early[1]}})))
		hourAgo := time.Now().Add(-time.Hour)
		require.Equal(t, late, rowIDs(list(heraldadmin.PublishedFilter{Since: hourAgo})))
		require.Equal(t, early, rowIDs(list(heraldadmin.PublishedFilter{Until: hourAgo})))
		require.Empty(t, list(heraldadmin.PublishedFilter{Topic: "billing", Type: "OrderPlaced"}))

		// Pages of two: every row once, in order.
		var paged []string
		for after := (heraldadmin.Position{}); ; {
			rows := list(heraldadmin.PublishedFilter{Limit: 2, After: after})
			if len(rows) == 0 {
				break
			}
			require.LessOrEqual(t, len(rows), 2)
			paged = append(paged, rowIDs(rows)...)
			after = rows[len(rows)-1].Position()
		}
		require.Equal(t, all, paged)

		for _, f := range []heraldadmin.PublishedFilter{
			{Limit: -1}, {Limit: heraldadmin.MaxListLimit + 1}, {IDs: []string{"not-a-uuid"}},
			{Since: hourAgo, Until: hourAgo}, {Since: hourAgo, Until: hourAgo.Add(-time.Minute)},
		} {
			_, err := pub.ListPublished(o.ctx(), f)
			require.Error(t, err, "%+v is refused", f)
		}
	}},
}

func ptr(s string) *string { return &s }
