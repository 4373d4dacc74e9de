package heraldmysql_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/heraldspec"
)

// Whatever the hosts and options, a DSN with the password hunter2 is read
// or refused without an error that shows it, and one read names its
// servers in order, go-sql-driver's first.
func FuzzParseDSNHosts(f *testing.F) {
	for _, s := range [][2]string{
		{"db1:3306,db2", "target_session_attrs=read-write"},
		{"db1,,db2", ""},
		{"[::1]:3307,db2:x", "timeout=2s&target_session_attrs=any"},
		{",", "target_session_attrs="},
		{"db1,db2", "target_session_attrs=hunter2"},
		{"a@b,c", "target_session_attrs=read-write&target_session_attrs=primary"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, hosts, query string) {
		dsn := "mysql://u:hunter2@" + hosts + "/db?" + query
		c, err := heraldmysql.ParseDSN(&heraldspec.Database{DSN: dsn})
		if err != nil {
			if !strings.Contains(hosts+query, "hunter2") {
				require.NotContains(t, err.Error(), "hunter2")
			}
			return
		}
		require.NotEmpty(t, c.Addrs)
		require.Equal(t, c.Addrs[0], c.MySQL.Addr)
		if !strings.Contains(hosts, "@") { // else the password ends at the host's '@'
			require.Equal(t, "hunter2", c.MySQL.Passwd)
		}
		require.NotContains(t, c.MySQL.Params, "target_session_attrs")
		_, err = c.Connector()
		require.NoError(t, err)
	})
}
