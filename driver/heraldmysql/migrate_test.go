package heraldmysql_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	heraldpkg "github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/internal/mysqltest"
	"github.com/herald-outbox/herald/heraldadmin"
)

// migrations returns the migrations table's rows: version, name.
func migrations(t *testing.T, db *sql.DB, database string) map[int]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT version, name FROM `"+database+"`.herald_outbox_migrations")
	require.NoError(t, err)
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var (
			v    int
			name string
		)
		require.NoError(t, rows.Scan(&v, &name))
		out[v] = name
	}
	require.NoError(t, rows.Err())
	return out
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("SeveralProcessesMigratingAtOnceApplyEachMigrationOnce", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.Pool(t)
		database := mysqltest.Database(t, db)
		cfg := &heraldmysql.Config{Database: database}
		// Each "process" has a pool of its own.
		var (
			wg   sync.WaitGroup
			errs = make(chan error, 6)
		)
		for range 6 {
			s, err := heraldmysql.New(mysqltest.Pool(t), cfg)
			require.NoError(t, err)
			wg.Go(func() { errs <- s.Migrate(t.Context()) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		s, err := heraldmysql.New(db, cfg)
		require.NoError(t, err)
		current, latest, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.Equal(t, latest, current)
		require.Equal(t, heraldmysql.Migrations(), migrations(t, db, database), "one row per migration")
		require.Equal(t, map[int]string{1: "001_create_outbox.sql", 5: "005_pauses.sql", 6: "006_relays.sql"},
			heraldmysql.Migrations(), "versions 2 to 4 are in the first table; later ones are numbered as on PostgreSQL and SQLite")
		require.NoError(t, s.Ping(t.Context()))
	})

	t.Run("MigrateWaitsForTheNamedLockAnotherProcessHolds", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.Pool(t)
		database := mysqltest.Database(t, db)
		s, err := heraldmysql.New(db, &heraldmysql.Config{Database: database})
		require.NoError(t, err)

		other, err := mysqltest.Pool(t).Conn(t.Context())
		require.NoError(t, err)
		defer other.Close()
		name := heraldmysql.LockName("migrate", database, "herald_outbox")
		var got int
		require.NoError(t, other.QueryRowContext(t.Context(), `SELECT GET_LOCK(?, 0)`, name).Scan(&got))
		require.Equal(t, 1, got)

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		require.Error(t, s.Migrate(ctx), "migrated while another process held the lock")
		current, _, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.Zero(t, current, "nothing was applied")

		require.NoError(t, other.QueryRowContext(t.Context(), `SELECT RELEASE_LOCK(?)`, name).Scan(&got))
		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, s.Ping(t.Context()))
	})

	t.Run("AMigrationCutShortBeforeItWasRecordedIsFinished", func(t *testing.T) {
		t.Parallel()
		o := setup(t, heraldmysql.Config{})
		ids := o.kit.Write(herald("t"), herald("t"))
		// As if the process died after CREATE TABLE ran but before its row
		// was written: MySQL commits DDL on its own.
		_, err := o.DB.ExecContext(t.Context(), "DELETE FROM `"+o.Config.Database+"`.herald_outbox_migrations")
		require.NoError(t, err)
		require.ErrorContains(t, o.Store.Ping(t.Context()), "run `herald migrate`")
		require.NoError(t, o.Store.Migrate(t.Context()))
		require.NoError(t, o.Store.Ping(t.Context()))
		rows, err := o.Store.ListEvents(t.Context(), heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})
		require.NoError(t, err)
		require.Len(t, rows, len(ids), "the table and its rows were kept")
	})

	t.Run("AnOutboxOfTheFirstVersionIsUpgradedWithItsRows", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.Pool(t)
		s, err := heraldmysql.New(db, &heraldmysql.Config{Database: mysqltest.Database(t, db)})
		require.NoError(t, err)
		require.NoError(t, s.MigrateFirst(t.Context(), 1))
		_, err = db.ExecContext(t.Context(), "INSERT INTO "+s.Table()+" (topic, payload) VALUES ('t', 'x')")
		require.NoError(t, err)
		require.ErrorContains(t, s.Ping(t.Context()), "run `herald migrate`", "version 1 is older than the driver's")

		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, s.Ping(t.Context()))
		rows, err := s.ListEvents(t.Context(), heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})
		require.NoError(t, err)
		require.Len(t, rows, 1, "the row written under version 1 is kept")
		require.NoError(t, s.Pause(t.Context(), heraldadmin.PauseParams{Kind: "topic", Name: "t"}))
		require.NoError(t, s.Beat(t.Context(), heraldpkg.RelayBeat{Owner: "r", Expiry: time.Minute, SinceClaim: -1}))
		listed, err := s.ListRelays(t.Context())
		require.NoError(t, err)
		require.Len(t, listed, 1, "the pauses and relays tables exist")
	})

	t.Run("ANewerSchemaIsRefused", func(t *testing.T) {
		t.Parallel()
		o := setup(t, heraldmysql.Config{})
		_, err := o.DB.ExecContext(t.Context(), "INSERT INTO `"+o.Config.Database+"`.herald_outbox_migrations (version, name) VALUES (999, '999_future.sql')")
		require.NoError(t, err)
		require.ErrorContains(t, o.Store.Migrate(t.Context()), "newer than this Herald knows")
		require.ErrorContains(t, o.Store.Ping(t.Context()), "upgrade Herald")
	})

	t.Run("PingBeforeMigrateSaysToMigrate", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.Pool(t)
		s, err := heraldmysql.New(db, &heraldmysql.Config{Database: mysqltest.Database(t, db)})
		require.NoError(t, err)
		require.ErrorContains(t, s.Ping(t.Context()), "schema version 0")
	})
}

func TestStatementsSplitAMigrationFile(t *testing.T) {
	got := heraldmysql.Statements("-- a comment; with a semicolon\nCREATE TABLE a (\n  x INT -- inline\n);\n\n-- another\nDROP TABLE b;\nSELECT 1")
	require.Equal(t, []string{"CREATE TABLE a (\n  x INT -- inline\n)", "DROP TABLE b", "SELECT 1"}, got)
}

func TestConfigNamesAreChecked(t *testing.T) {
	for _, cfg := range []heraldmysql.Config{
		{Table: "Outbox"}, {Table: "a-b"}, {Database: "db; DROP"}, {Table: strings.Repeat("t", 41)},
		{MaxPayloadBytes: -1},
	} {
		err := cfg.Validate()
		require.Error(t, err, "%+v", cfg)
		require.NotContains(t, err.Error(), "Config.Schema", "the field is named as this driver spells it")
	}
	require.ErrorContains(t, (&heraldmysql.Config{Database: "Bad"}).Validate(), "Config.Database")
	require.NoError(t, (&heraldmysql.Config{Database: "app", Table: "events"}).Validate())
}
