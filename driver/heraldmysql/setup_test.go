package heraldmysql_test

import (
	"testing"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/internal/mysqltest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// TestMain checks for leaked goroutines once the tests are done.
func TestMain(m *testing.M) { testenv.Main(m) }

// outbox is a migrated outbox in a database of the test's own, with the
// suite's kit on it.
type outbox struct {
	*mysqltest.Outbox
	kit *heralddrivertest.Kit
}

func setup(t *testing.T, cfg heraldmysql.Config) outbox {
	t.Helper()
	o := mysqltest.New(t, mysqltest.Pool(t), cfg)
	return outbox{Outbox: o, kit: heralddrivertest.NewKit(t, o.Driver)}
}
