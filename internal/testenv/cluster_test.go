//go:build linux || darwin

package testenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	require.Negative(t, compareVersions("9.6", "10"))
	require.Negative(t, compareVersions("15", "17"))
	require.Positive(t, compareVersions("17", "9.6"))
	require.Zero(t, compareVersions("15", "15"))
}

func TestSweepStaleClusters(t *testing.T) {
	// Not parallel: it sweeps the real temp dir, where a cluster started by
	// another test of this binary lives (it is locked, so it survives).
	dead, err := os.MkdirTemp("", clusterDirPrefix+"*")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dead) })
	require.NoError(t, os.WriteFile(filepath.Join(dead, "lock"), nil, 0o600))

	live, err := os.MkdirTemp("", clusterDirPrefix+"*")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(live) })
	lock, err := lockDir(live)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Close() })

	young, err := os.MkdirTemp("", clusterDirPrefix+"*")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(young) })

	old := time.Now().Add(-time.Hour)
	for _, d := range []string{dead, live} {
		require.NoError(t, os.Chtimes(d, old, old))
	}

	sweepStaleClusters(clusterDirPrefix)

	require.NoDirExists(t, dead)
	require.DirExists(t, live)
	require.DirExists(t, young)
}
