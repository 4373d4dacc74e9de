package heraldmysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	heraldpkg "github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/internal/mysqltest"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestDSNsAcceptedThroughHeraldspec(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		db      heraldspec.Database
		display string
		check   func(t *testing.T, c *heraldmysql.DSNConfig)
	}{
		{"URL", heraldspec.Database{DSN: "mysql://app:hunter2@db.example:3307/shop"}, "app@db.example:3307/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) {
				require.Equal(t, "hunter2", c.MySQL.Passwd)
				require.Equal(t, "shop", c.MySQL.DBName)
				require.True(t, c.MySQL.InterpolateParams, "one round trip per statement")
				require.Equal(t, heraldmysql.Config{}, c.Config, "the driver's defaults")
			}},
		{"DefaultPortAndSchemeInAnyCase", heraldspec.Database{DSN: "MySQL://app@db.example/shop"}, "app@db.example:3306/shop", nil},
		{"PercentEncodedPassword", heraldspec.Database{DSN: "mysql://app:p%2Fss%3Fw@h/shop"}, "app@h:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) { require.Equal(t, "p/ss?w", c.MySQL.Passwd) }},
		{"DriverOptions", heraldspec.Database{DSN: "mysql://app@h/shop?timeout=5s&parseTime=true"}, "app@h:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) {
				require.Equal(t, "5s", c.MySQL.Timeout.String())
				require.True(t, c.MySQL.ParseTime)
			}},
		{"InterpolationLeftToTheURL", heraldspec.Database{DSN: "mysql://app@h/shop?interpolateParams=false"}, "app@h:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) { require.False(t, c.MySQL.InterpolateParams) }},
		{"ACharacterSetOfItsOwn", heraldspec.Database{DSN: "mysql://app@h/shop?charset=utf8mb4"}, "app@h:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) { require.False(t, c.MySQL.InterpolateParams) }},
		{"OneHostIsTheFirstOfItsList", heraldspec.Database{DSN: "mysql://app:hunter2@db.example:3307/shop"}, "app@db.example:3307/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) {
				require.Equal(t, []string{"db.example:3307"}, c.Addrs)
				require.False(t, c.ReadWrite)
			}},
		{"SeveralHostsTriedInOrder", heraldspec.Database{DSN: "mysql://app:hunter2@db1:3307,db2,[::1]:3309/shop?timeout=2s"},
			"app@db1:3307,db2:3306,[::1]:3309/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) {
				require.Equal(t, []string{"db1:3307", "db2:3306", "[::1]:3309"}, c.Addrs)
				require.Equal(t, "db1:3307", c.MySQL.Addr)
				require.Equal(t, "hunter2", c.MySQL.Passwd)
				require.Equal(t, "2s", c.MySQL.Timeout.String())
				require.False(t, c.ReadWrite, "target_session_attrs=any is the default")
			}},
		{"ACommaInThePassword", heraldspec.Database{DSN: "mysql://app:hun,ter2@db1,db2/shop"}, "app@db1:3306,db2:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) { require.Equal(t, "hun,ter2", c.MySQL.Passwd) }},
		{"ReadWriteOnly", heraldspec.Database{DSN: "mysql://app@db1,db2/shop?parseTime=true&target_session_attrs=read-write"},
			"app@db1:3306,db2:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) {
				require.True(t, c.ReadWrite)
				require.True(t, c.MySQL.ParseTime)
				require.Empty(t, c.MySQL.Params, "target_session_attrs is not sent to the server as a session variable")
				require.True(t, c.MySQL.InterpolateParams)
			}},
		{"ReadWriteOnOneHost", heraldspec.Database{DSN: "mysql://app@db1/shop?target_session_attrs=read-write"}, "app@db1:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) { require.True(t, c.ReadWrite) }},
		{"AnyServer", heraldspec.Database{DSN: "mysql://app@db1,db2/shop?target_session_attrs=any"}, "app@db1:3306,db2:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) { require.False(t, c.ReadWrite) }},
		{"ThePublicSchemaIsTheDefault", heraldspec.Database{DSN: "mysql://app@h/shop", Schema: "public", Table: "events",
			Config: &heraldmysql.Config{MaxPayloadBytes: 10}}, "app@h:3306/shop",
			func(t *testing.T, c *heraldmysql.DSNConfig) {
				require.Equal(t, heraldmysql.Config{Table: "events", MaxPayloadBytes: 10}, c.Config)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := heraldspec.ParseDatabase(tc.db)
			require.NoError(t, err)
			require.Equal(t, "mysql", p.Driver)
			require.Equal(t, tc.display, p.Display())
			c, ok := p.Target().(*heraldmysql.DSNConfig)
			require.True(t, ok)
			if c.MySQL.Passwd != "" {
				require.Contains(t, p.Secrets(), c.MySQL.Passwd)
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
		{"NoDatabase", heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:1"}, "DSN", "mysql:// needs one database as its path"},
		{"TwoDatabases", heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:1/a/b"}, "DSN", "mysql:// needs one database as its path"},
		{"NoHost", heraldspec.Database{DSN: "mysql://u:hunter2@/db"}, "DSN", "mysql:// needs a host"},
		{"BadOption", heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:1/db?timeout=soon"}, "DSN", `option timeout=soon: time: invalid duration "soon"`},
		{"UnencodedSlashInThePassword", heraldspec.Database{DSN: "mysql://u:pw0rd/hunter2@127.0.0.1:1/db"}, "DSN",
			"the password holds a '/', '?' or '#' that is not percent-encoded: write them %2F, %3F and %23"},
		{"BadPort", heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:port/db"}, "DSN", "not a mysql:// URL"},
		{"ABadHost", heraldspec.Database{DSN: "mysql://u:hunter2@]/db"}, "DSN", "mysql:// host ] is not host or host:port"},
		{"AnEmptyHostInTheList", heraldspec.Database{DSN: "mysql://u:hunter2@h1,,h3/db"}, "DSN", "mysql:// host 2 of 3 is empty"},
		{"AnEmptyFirstHost", heraldspec.Database{DSN: "mysql://u:hunter2@,h2/db"}, "DSN", "mysql:// host 1 of 2 is empty"},
		{"ABadPortInTheList", heraldspec.Database{DSN: "mysql://u:hunter2@h1:3306,h2:port/db"}, "DSN",
			"mysql:// host 2 of 2 (h2:port) is not host or host:port"},
		{"AnUnknownTargetSessionAttrs", heraldspec.Database{DSN: "mysql://u:hunter2@h1,h2/db?target_session_attrs=primary"}, "DSN",
			"option target_session_attrs=primary: want read-write or any"},
		{"AnEmptyTargetSessionAttrs", heraldspec.Database{DSN: "mysql://u:hunter2@h1,h2/db?target_session_attrs="}, "DSN",
			"option target_session_attrs needs a value: read-write or any"},
		{"ABadOptionBesideTheHostList", heraldspec.Database{DSN: "mysql://u:hunter2@h1,h2/db?target_session_attrs=read-write&timeout=soon"},
			"DSN", `option timeout=soon: time: invalid duration "soon"`},
		{"ASchema", heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:1/db", Schema: "other"}, "Schema",
			"on MySQL the database is the schema: name it in the DSN's path"},
		{"BadTable", heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:1/db", Table: "Bad-Name"}, "Table", `"Bad-Name" must match`},
		{"AnotherDriversConfig", heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:1/db", Config: &heraldspec.Database{}}, "Config",
			"a *heraldspec.Database, not a *heraldmysql.Config"},
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

// Open against the test server: the store, admin and writer of one
// table on one pool, and a refusal told from an outage.
func TestOpenThroughHeraldspec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := mysqltest.Pool(t)

	t.Run("OpensTheOutbox", func(t *testing.T) {
		t.Parallel()
		database := mysqltest.Database(t, server)
		_, o, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: testenv.MySQLURL(t, database), MaxConns: 2})
		require.NoError(t, err)
		defer o.Close()
		require.NoError(t, o.Store.Migrate(ctx))
		require.NoError(t, o.Store.Ping(ctx))
		db, ok := o.Client.(*sql.DB)
		require.True(t, ok)
		require.Equal(t, 2, db.Stats().MaxOpenConnections)
		w, ok := o.Writer.(*heraldpkg.Writer[*sql.Tx])
		require.True(t, ok, "a database/sql writer: %T", o.Writer)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, w.WriteTx(ctx, tx, heraldpkg.Message{Topic: "orders", Payload: []byte("x")}))
		require.NoError(t, tx.Commit())
		st, err := o.Admin.Status(ctx)
		require.NoError(t, err)
		require.Len(t, st.Topics, 1)
		require.EqualValues(t, 1, st.Topics[0].Count, "the writer wrote into the table the store reads")
	})

	t.Run("AnUnknownDatabaseIsRefusedNotUnreachable", func(t *testing.T) {
		t.Parallel()
		_, _, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: testenv.MySQLURL(t, "herald_no_such_db")})
		var oe *heraldspec.DatabaseOpenError
		require.ErrorAs(t, err, &oe)
		require.False(t, oe.Unreachable, "%v", err)
		var myErr *mysql.MySQLError
		require.ErrorAs(t, err, &myErr, "the server's own answer")
	})

	t.Run("ADownServerIsUnreachableAndItsPasswordUnsaid", func(t *testing.T) {
		t.Parallel()
		_, _, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: "mysql://u:hunter2@127.0.0.1:1/db?timeout=5s"})
		var oe *heraldspec.DatabaseOpenError
		require.ErrorAs(t, err, &oe)
		require.True(t, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), "cannot reach the database u@127.0.0.1:1/db: ")
		require.NotContains(t, err.Error(), "hunter2")
	})
}
