package heraldpg

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldadmin"
)

// The recovery from a dropped slot: the streamed rows written since a time
// become ready and claimable, older ones and rows of other states stay as
// they are, and the slot's record of positions is forgotten.
func TestRecoveryFromADroppedSlot(t *testing.T) {
	t.Parallel()
	o := newStreamOutbox(t)
	old := o.insert("orders", "k", `state, created_at`, `'streamed', now() - interval '2 hours'`)
	var recent []string
	for range 5 {
		recent = append(recent, o.insert("orders", "k", `state`, `'streamed'`))
	}
	published := o.insert("orders", "k", `state, published_at`, `'published', now()`)
	var since time.Time
	require.NoError(t, o.pool.QueryRow(t.Context(), `SELECT now() - interval '1 hour'`).Scan(&since))

	n, err := o.d.RequeueStreamed(t.Context(), since, 2)
	require.NoError(t, err)
	require.Equal(t, 5, n, "in statements of two, until none is left")
	for _, id := range recent {
		require.Equal(t, heraldadmin.StateReady, o.get(id).State)
	}
	require.Equal(t, heraldadmin.StateStreamed, o.get(old).State, "written before the time given")
	require.Equal(t, heraldadmin.StatePublished, o.get(published).State)
	require.Equal(t, recent, envIDs(o.claim(false)), "claimed in their order")

	_, err = o.d.RequeueStreamed(t.Context(), since, 0)
	require.ErrorContains(t, err, "limit 0 is not positive")

	o.exec(`INSERT INTO ` + o.d.names.Render(`{{.Schema}}."{{.Name}}_cdc"`) + ` (slot, position) VALUES ('s1', '0/16B3748')`)
	forgot, err := o.d.ForgetSlot(t.Context(), "s1")
	require.NoError(t, err)
	require.True(t, forgot)
	forgot, err = o.d.ForgetSlot(t.Context(), "s1")
	require.NoError(t, err)
	require.False(t, forgot)
}
