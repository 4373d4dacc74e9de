package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSettingsAreReadFromTheFileTheirFileVariableNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	missingDB := filepath.Join(dir, "nothing-here.db")

	t.Run("the DSN comes from HERALD_DB_FILE, without its final line break", func(t *testing.T) {
		r := cli(t, map[string]string{"HERALD_DB_FILE": write("dsn", "sqlite:"+missingDB+"\n")}, "status")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "nothing-here.db", r)
		_, err := os.Stat(missingDB)
		require.ErrorIs(t, err, os.ErrNotExist, "status must not create the file")
	})
	t.Run("a variable and its file twin together are refused", func(t *testing.T) {
		r := cli(t, map[string]string{"HERALD_DB": "sqlite:x.db", "HERALD_DB_FILE": write("dsn2", "sqlite:y.db")}, "status")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "herald: HERALD_DB and HERALD_DB_FILE are both set: give one", r)
	})
	t.Run("an unreadable or empty file is named, and its content never shown", func(t *testing.T) {
		r := cli(t, map[string]string{"HERALD_DB_FILE": filepath.Join(dir, "absent")}, "status")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "herald: HERALD_DB_FILE names "+filepath.Join(dir, "absent")+", which cannot be read: no such file or directory", r)

		r = cli(t, map[string]string{"HERALD_DB_FILE": write("empty", "\n")}, "status")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "is empty", r)

		r = cli(t, map[string]string{"HERALD_DB_FILE": dir}, "status")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "is not a file", r)

		const secret = "s3cret-Passw0rd"
		r = cli(t, map[string]string{"HERALD_DB_FILE": write("bad", "postgres://u:"+secret+"@127.0.0.1:1/db?sslmode=bogus")}, "status")
		require.Equal(t, 2, r.code, r)
		require.NotContains(t, r.stderr+r.stdout, secret, r)
	})
	t.Run("a secret's file variable is named whole, the redactor hiding none of the message", func(t *testing.T) {
		r := cli(t, map[string]string{"HERALD_WEBHOOK_SECRET_FILE": filepath.Join(dir, "absent")},
			"relay", "--db", "postgres://127.0.0.1:1/db", "--publisher", "https://hooks.example/in")
		require.Equal(t, 2, r.code, r)
		require.Equal(t, "herald: HERALD_WEBHOOK_SECRET_FILE names "+filepath.Join(dir, "absent")+", which cannot be read: no such file or directory\n", r.stderr)
	})
	t.Run("secrets without a flag have file twins too", func(t *testing.T) {
		r := cli(t, map[string]string{"HERALD_ADMIN_TOKEN_FILE": write("token", "tok3n-x\n")},
			"relay", "--db", "postgres://127.0.0.1:1/db", "--publisher", "nats://127.0.0.1:1", "--admin-addr", "127.0.0.1:0")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "HERALD_ADMIN_TOKEN is shorter than", r)
		require.NotContains(t, r.stderr, "tok3n-x", r)
	})
}
