package ignored

import (
	"context"
	"database/sql"
	"testing"

	"github.com/herald-outbox/herald"
)

// In tests too: an ignored WriteTx error hides the failure under test.
func TestWritesAnEvent(t *testing.T) {
	var w *herald.Writer[*sql.Tx]
	var tx *sql.Tx
	_ = w.WriteTx(context.Background(), tx, msg) // want `the error from WriteTx is ignored`
}
