package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// --claim-rows is heraldpg's Config.ClaimRows: another database never
// leases keys, so asking it to claim rows instead is bad input, refused
// before anything connects.
func TestClaimRowsIsForAPostgreSQLOutbox(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	r := cli(t, nil, "migrate", "--db", "sqlite:"+path)
	require.Zero(t, r.code, r.stderr)
	r = cli(t, nil, "relay", "--db", "sqlite:"+path, "--publisher", "nats://127.0.0.1:1", "--claim-rows")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "herald: --claim-rows: only a PostgreSQL outbox leases keys; the others always claim rows\n", r.stderr)
}
