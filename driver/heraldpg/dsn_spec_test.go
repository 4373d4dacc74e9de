package heraldpg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestDSNsAcceptedThroughHeraldspec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		db      heraldspec.Database
		display string
		check   func(t *testing.T, c *heraldpg.DSNConfig)
	}{
		{"URL", heraldspec.Database{DSN: "postgres://app:hunter2@db.example:6543/shop?sslmode=disable"}, "app@db.example:6543/shop",
			func(t *testing.T, c *heraldpg.DSNConfig) {
				require.Equal(t, "hunter2", c.Pool.ConnConfig.Password)
				require.Equal(t, "herald", c.Pool.ConnConfig.RuntimeParams["application_name"])
				require.Equal(t, heraldpg.Config{}, c.Config, "the driver's defaults")
			}},
		{"SchemeInAnyCase", heraldspec.Database{DSN: "PostgreSQL://app@db.example/shop"}, "app@db.example:5432/shop", nil},
		{"KeywordsWithAQuotedPassword", heraldspec.Database{DSN: "host=db.example user=app password='p w' dbname=shop port=6543"},
			"app@db.example:6543/shop", func(t *testing.T, c *heraldpg.DSNConfig) {
				require.Equal(t, "p w", c.Pool.ConnConfig.Password)
			}},
		{"PercentEncodedPassword", heraldspec.Database{DSN: "postgres://app:p%40ss%2Fw@h/shop"}, "app@h:5432/shop",
			func(t *testing.T, c *heraldpg.DSNConfig) { require.Equal(t, "p@ss/w", c.Pool.ConnConfig.Password) }},
		{"TheDSNsApplicationNameWins", heraldspec.Database{DSN: "postgres://app@h/shop?application_name=billing", ApplicationName: "relay"},
			"app@h:5432/shop", func(t *testing.T, c *heraldpg.DSNConfig) {
				require.Equal(t, "billing", c.Pool.ConnConfig.RuntimeParams["application_name"])
			}},
		{"ApplicationName", heraldspec.Database{DSN: "postgres://app@h/shop", ApplicationName: "relay"}, "app@h:5432/shop",
			func(t *testing.T, c *heraldpg.DSNConfig) {
				require.Equal(t, "relay", c.Pool.ConnConfig.RuntimeParams["application_name"])
			}},
		{"MaxConns", heraldspec.Database{DSN: "postgres://app@h/shop", MaxConns: 3}, "app@h:5432/shop",
			func(t *testing.T, c *heraldpg.DSNConfig) { require.EqualValues(t, 3, c.Pool.MaxConns) }},
		{"TheDSNsPoolSizeWins", heraldspec.Database{DSN: "postgres://app@h/shop?pool_max_conns=7", MaxConns: 3}, "app@h:5432/shop",
			func(t *testing.T, c *heraldpg.DSNConfig) { require.EqualValues(t, 7, c.Pool.MaxConns) }},
		{"NamesOverTheConfigs", heraldspec.Database{DSN: "postgres://app@h/shop", Schema: "shop", Table: "events",
			Config: &heraldpg.Config{Table: "other", ClaimRows: true}}, "app@h:5432/shop",
			func(t *testing.T, c *heraldpg.DSNConfig) {
				require.Equal(t, heraldpg.Config{Schema: "shop", Table: "events", ClaimRows: true}, c.Config)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := heraldspec.ParseDatabase(tc.db)
			require.NoError(t, err)
			require.Equal(t, "postgres", p.Driver)
			require.Equal(t, tc.display, p.Display())
			c, ok := p.Target().(*heraldpg.DSNConfig)
			require.True(t, ok)
			if pw := c.Pool.ConnConfig.Password; pw != "" {
				require.Contains(t, p.Secrets(), pw)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestDSNsRefusedThroughHeraldspec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		db    heraldspec.Database
		field string
		says  string
	}{
		{"UnencodedAtInThePassword", heraldspec.Database{DSN: "postgres://u:pw0rd@hunter2@127.0.0.1/db"}, "DSN",
			"the password holds an '@' or '/' that is not percent-encoded: write them %40 and %2F"},
		{"UnencodedSlashInThePassword", heraldspec.Database{DSN: "postgresql://u:hunter2/x@h@127.0.0.1:99999/db"}, "DSN",
			"the password holds an '@' or '/'"},
		{"BadPort", heraldspec.Database{DSN: "postgres://u:hunter2@127.0.0.1:notaport/db"}, "DSN", "cannot parse"},
		{"BadSSLMode", heraldspec.Database{DSN: "postgres://u:hunter2@127.0.0.1/db?sslmode=bogus"}, "DSN", "sslmode"},
		{"BadKeywordPort", heraldspec.Database{DSN: "host=localhost port=notaport password=hunter2"}, "DSN", "cannot parse"},
		{"BadKeywordQuotedPassword", heraldspec.Database{DSN: "host=localhost port=x password='hunter2 x'"}, "DSN", "cannot parse"},
		{"PasswordInTheQuery", heraldspec.Database{DSN: "postgres://u@127.0.0.1:x/db?password=hunter2"}, "DSN", "cannot parse"},
		{"UnknownScheme", heraldspec.Database{DSN: "postgress://u:hunter2@h/db"}, "DSN", `scheme "postgress" is not supported`},
		{"BadSchema", heraldspec.Database{DSN: "postgres://u:hunter2@h/db", Schema: "a b"}, "Schema", `"a b" must match`},
		{"BadTable", heraldspec.Database{DSN: "postgres://u:hunter2@h/db", Table: "Bad-Name"}, "Table", `"Bad-Name" must match`},
		{"BadTableInTheConfig", heraldspec.Database{DSN: "postgres://u:hunter2@h/db", Config: &heraldpg.Config{Table: "Bad-Name"}}, "Config",
			`Config.Table "Bad-Name" must match`},
		{"ExclusiveModes", heraldspec.Database{DSN: "postgres://u:hunter2@h/db",
			Config: &heraldpg.Config{EmitMessages: true, DeleteAfterInsert: true}}, "Config", "exclude each other"},
		{"AnotherDriversConfig", heraldspec.Database{DSN: "postgres://u:hunter2@h/db", Config: &heraldspec.Database{}}, "Config",
			"a *heraldspec.Database, not a *heraldpg.Config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := heraldspec.ParseDatabase(tc.db)
			var de *heraldspec.DatabaseError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tc.field, de.Field)
			require.Contains(t, de.Reason(), tc.says)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// Open against the test server: the store, admin and writer of one table,
// the pool they share, and a refusal told from an outage.
func TestOpenThroughHeraldspec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.PostgresDSN(t)

	t.Run("OpensTheOutbox", func(t *testing.T) {
		t.Parallel()
		p, o, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: dsn, Schema: testenv.Schema(t), MaxConns: 2})
		require.NoError(t, err)
		defer o.Close()
		require.NoError(t, o.Store.Migrate(ctx))
		require.NoError(t, o.Store.Ping(ctx))
		pool, ok := o.Client.(*pgxpool.Pool)
		require.True(t, ok)
		require.EqualValues(t, 2, pool.Config().MaxConns)
		var app string
		require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&app))
		require.Equal(t, "herald", app)

		w, ok := o.Writer.(*herald.Writer[pgx.Tx])
		require.True(t, ok, "a pgx writer: %T", o.Writer)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return w.WriteTx(ctx, tx, herald.Message{Topic: "orders", Payload: []byte("x")})
		}))
		st, err := o.Admin.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, []heraldadmin.TopicStatus{{Topic: "orders", State: heraldadmin.StateReady, Count: 1,
			Oldest: st.Topics[0].Oldest}}, st.Topics, "the writer wrote into the table the store reads")
		cc, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database), p.Display())
	})

	t.Run("AnUnknownDatabaseIsRefusedNotUnreachable", func(t *testing.T) {
		t.Parallel()
		p, err := heraldspec.ParseDatabase(heraldspec.Database{DSN: dsn})
		require.NoError(t, err)
		c := p.Target().(*heraldpg.DSNConfig)
		c.Pool.ConnConfig.Database = "herald_no_such_database"
		_, err = p.Open(ctx)
		var oe *heraldspec.DatabaseOpenError
		require.ErrorAs(t, err, &oe)
		require.False(t, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), `database "herald_no_such_database" does not exist`)
	})

	t.Run("ADownServerIsUnreachableAndItsPasswordUnsaid", func(t *testing.T) {
		t.Parallel()
		_, _, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=5"})
		var oe *heraldspec.DatabaseOpenError
		require.ErrorAs(t, err, &oe)
		require.True(t, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), "cannot reach the database u@127.0.0.1:1/db: ")
		require.NotContains(t, err.Error(), "hunter2")
	})
}
