package heraldmysql_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	heraldpkg "github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/internal/mysqltest"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Timestamps are UTC in the table and in SQL; the DSN's parseTime and loc
// (how go-sql-driver reads and writes times), the session's time_zone and
// client-side interpolation of parameters change none of them.
func TestTimesDoNotDependOnTheDSN(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(*mysql.Config){
		"Defaults": func(*mysql.Config) {},
		"ParseTimeInAnotherZoneWithASessionTimeZone": func(c *mysql.Config) {
			c.ParseTime = true
			c.Loc = time.FixedZone("UTC-5", -5*3600)
			c.Params = map[string]string{"time_zone": "'+09:00'"}
		},
		"InterpolatedParameters": func(c *mysql.Config) {
			c.InterpolateParams = true
			c.Params = map[string]string{"time_zone": "'-03:00'"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := mysql.ParseDSN(mysqltest.DSN(t))
			require.NoError(t, err)
			edit(cfg)
			conn, err := mysql.NewConnector(cfg)
			require.NoError(t, err)
			db := sql.OpenDB(conn)
			t.Cleanup(func() { require.NoError(t, db.Close()) })
			o := mysqltest.New(t, db, heraldmysql.Config{})
			kit := heralddrivertest.NewKit(t, o.Driver)

			at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
			m := herald("t")
			m.AvailableAt = at
			id := kit.Write(m)[0]
			ev := kit.Get(id)
			require.True(t, ev.AvailableAt.Equal(at), "available_at %v, written %v", ev.AvailableAt, at)
			require.WithinDuration(t, time.Now(), ev.CreatedAt, time.Minute)

			token, envs := kit.Claim(10, time.Hour)
			require.Len(t, envs, 1)
			require.WithinDuration(t, time.Now(), envs[0].CreatedAt, time.Minute)
			ev = kit.Get(id)
			require.NotNil(t, ev.LeaseUntil)
			require.WithinDuration(t, time.Now().Add(time.Hour), *ev.LeaseUntil, time.Minute)
			require.Equal(t, 1, kit.Complete(heraldpkg.CompleteParams{Token: token, Published: []string{id}}).Published)
			ev = kit.Get(id)
			require.NotNil(t, ev.PublishedAt)
			require.WithinDuration(t, time.Now(), *ev.PublishedAt, time.Minute)

			rows, err := o.Store.ListPublished(t.Context(), heraldadmin.PublishedFilter{Since: time.Now().Add(-time.Minute)})
			require.NoError(t, err)
			require.Len(t, rows, 1, "the published listing compares times in UTC too")
		})
	}
}
