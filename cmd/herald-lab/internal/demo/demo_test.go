package demo_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/demo"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	// The demo re-executes this test binary to run its relay child.
	demo.RunRelayChildIfAsked()
	m.Run()
}

func TestDemoSmallRunKeepsEveryInvariant(t *testing.T) {
	testenv.Long(t)
	var progress, log bytes.Buffer
	r, err := demo.Run(context.Background(), demo.Config{
		Orders: 300, Rate: 150, Outage: 500 * time.Millisecond, Dir: t.TempDir(),
		Progress: &progress, Log: &log,
	})
	require.NoError(t, err)
	require.True(t, r.OK(), "%+v", r)
	require.Zero(t, r.Lost)
	require.Zero(t, r.Ghosts)
	require.Positive(t, r.RolledBack, "some transactions roll back on purpose")
	require.Equal(t, 300, r.Committed+r.RolledBack)
	require.Equal(t, r.Committed, r.Received)
	require.GreaterOrEqual(t, r.Published, r.Committed)
	require.Positive(t, r.P99)
	require.Contains(t, progress.String(), "committed")
	require.Contains(t, log.String(), "stopping the broker")
	require.Contains(t, log.String(), "killing the relay")

	var out bytes.Buffer
	r.Print(&out)
	require.Contains(t, out.String(), "lost                          0  ok")
	require.Contains(t, out.String(), "ghosts                        0  ok")
	require.Contains(t, out.String(), "(includes the 500ms broker outage")
	require.Contains(t, progress.String(), "\rcommitted", "a terminal's line is rewritten in place")
}

func TestDemoRefusesBadSizes(t *testing.T) {
	for _, cfg := range []demo.Config{{Orders: 5}, {Rate: -1}, {RollbackPercent: 95}, {Outage: -time.Second}} {
		_, err := demo.Run(context.Background(), cfg)
		require.Error(t, err, "%+v", cfg)
	}
}
