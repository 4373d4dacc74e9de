package heraldsqlite_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldspec"
)

func TestDSNsAcceptedThroughHeraldspec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.db")
	require.NoError(t, os.WriteFile(existing, nil, 0o600))
	for _, tc := range []struct {
		name   string
		db     heraldspec.Database
		path   string
		config heraldsqlite.Config
	}{
		{"AnExistingFile", heraldspec.Database{DSN: "sqlite:" + existing}, existing, heraldsqlite.Config{}},
		{"TwoSlashesAreNotPartOfThePath", heraldspec.Database{DSN: "sqlite://" + existing}, existing, heraldsqlite.Config{}},
		{"ARelativePath", heraldspec.Database{DSN: "sqlite:rel/x.db", Create: true}, "rel/x.db", heraldsqlite.Config{}},
		{"ANewFileWithCreate", heraldspec.Database{DSN: "sqlite:" + dir + "/new.db", Create: true}, dir + "/new.db", heraldsqlite.Config{}},
		{"ThePublicSchemaIsTheDefault", heraldspec.Database{DSN: "sqlite:" + existing, Schema: "public", Table: "events"}, existing,
			heraldsqlite.Config{Table: "events"}},
		{"TableOverTheConfigs", heraldspec.Database{DSN: "sqlite:" + existing, Table: "events",
			Config: &heraldsqlite.Config{Table: "other", MaxPayloadBytes: 10}}, existing, heraldsqlite.Config{Table: "events", MaxPayloadBytes: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := heraldspec.ParseDatabase(tc.db)
			require.NoError(t, err)
			require.Equal(t, "sqlite", p.Driver)
			require.Equal(t, tc.path, p.Display())
			require.Empty(t, p.Secrets())
			c, ok := p.Target().(*heraldsqlite.DSNConfig)
			require.True(t, ok)
			require.Equal(t, tc.path, c.Path)
			require.Equal(t, tc.config, c.Config)
		})
	}
	_, err := os.Stat(dir + "/new.db")
	require.ErrorIs(t, err, fs.ErrNotExist, "parsing creates nothing")
}

func TestDSNsRefusedThroughHeraldspec(t *testing.T) {
	t.Parallel()
	existing := filepath.Join(t.TempDir(), "existing.db")
	require.NoError(t, os.WriteFile(existing, nil, 0o600))
	for _, tc := range []struct {
		name  string
		db    heraldspec.Database
		field string
		says  string
	}{
		{"NoPath", heraldspec.Database{DSN: "sqlite:"}, "DSN", "sqlite: needs a file path, as in sqlite:path/to/file.db"},
		{"NoPathAfterSlashes", heraldspec.Database{DSN: "sqlite://"}, "DSN", "needs a file path"},
		{"AMissingFile", heraldspec.Database{DSN: "sqlite:" + existing + ".typo"}, "DSN",
			"SQLite database " + existing + ".typo does not exist; Database.Create creates it"},
		{"ASchema", heraldspec.Database{DSN: "sqlite:" + existing, Schema: "other"}, "Schema",
			"SQLite has no schemas; name the table with Database.Table"},
		{"BadTable", heraldspec.Database{DSN: "sqlite:" + existing, Table: "Bad-Name"}, "Table", `"Bad-Name" must match`},
		{"SQLitesOwnTableName", heraldspec.Database{DSN: "sqlite:" + existing, Table: "sqlite_x"}, "Table", "must not start with sqlite_"},
		{"AnotherDriversConfig", heraldspec.Database{DSN: "sqlite:" + existing, Config: &heraldspec.Database{}}, "Config",
			"a *heraldspec.Database, not a *heraldsqlite.Config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := heraldspec.ParseDatabase(tc.db)
			var de *heraldspec.DatabaseError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.field, de.Field)
			require.Contains(t, de.Reason(), tc.says)
		})
	}
	_, err := heraldspec.ParseDatabase(heraldspec.Database{DSN: "sqlite:" + existing + ".typo"})
	require.ErrorIs(t, err, fs.ErrNotExist, "a missing file is told apart")
}

// Open on a real file: created when asked, migrated, written and read
// through one pool; a file that is not a database is refused.
func TestOpenThroughHeraldspec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "outbox.db")
	p, o, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "sqlite:" + path, Create: true, MaxConns: 2, Table: "events"})
	require.NoError(t, err)
	defer o.Close()
	require.Equal(t, path, p.Display())
	require.NoError(t, o.Store.Migrate(ctx))
	require.NoError(t, o.Store.Ping(ctx))
	db, ok := o.Client.(*sql.DB)
	require.True(t, ok)
	require.Equal(t, 2, db.Stats().MaxOpenConnections)
	w, ok := o.Writer.(*herald.Writer[*sql.Tx])
	require.True(t, ok, "a database/sql writer: %T", o.Writer)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, w.WriteTx(ctx, tx, herald.Message{Topic: "orders", Payload: []byte("x")}))
	require.NoError(t, tx.Commit())
	st, err := o.Admin.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Topics, 1)
	require.EqualValues(t, 1, st.Topics[0].Count, "the writer wrote into the table the store reads")

	notADB := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(notADB, []byte("not a database at all, but text long enough"), 0o600))
	_, _, err = heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "sqlite:" + notADB})
	var oe *heraldspec.DatabaseOpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable)
}
