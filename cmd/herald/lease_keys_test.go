package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// --lease-keys is heraldpg's Config.LeaseKeys: another database is bad
// input, refused before anything connects.
func TestLeaseKeysIsForAPostgreSQLOutbox(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	r := cli(t, nil, "migrate", "--db", "sqlite:"+path)
	require.Zero(t, r.code, r.stderr)
	r = cli(t, nil, "relay", "--db", "sqlite:"+path, "--publisher", "nats://127.0.0.1:1", "--lease-keys")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "herald: --lease-keys: only a PostgreSQL outbox leases keys\n", r.stderr)
}
