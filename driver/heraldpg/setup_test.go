package heraldpg_test

import (
	"testing"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	runOrderChildIfAsked()
	testenv.Main(m)
}

// bundle is what most tests need: a fresh migrated outbox in a schema of its
// own (pool, store, pgx writer) and the shared kit's helpers on it. The
// behaviour every driver shares is tested by driver/heralddrivertest; the
// tests here are PostgreSQL's own.
type bundle struct {
	*pgtest.Outbox
	*heralddrivertest.Kit
}

func setup(t *testing.T) *bundle {
	t.Helper()
	o := pgtest.New(t, testenv.PostgresPool(t), heraldpg.Config{})
	return &bundle{Outbox: o, Kit: heralddrivertest.NewKit(t, o.Driver)}
}
