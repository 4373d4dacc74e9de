package txmismatch

import (
	"context"
	"testing"
)

// Tests hold two transactions on purpose (one to look at the other):
// not reported.
func TestSeesNothingBeforeCommit(t *testing.T) {
	ctx := context.Background()
	s := &service{}
	tx, _ := s.db.BeginTx(ctx, nil)
	reader, _ := s.db.BeginTx(ctx, nil)
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM herald_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := s.outbox.WriteTx(ctx, tx, msg); err != nil {
		t.Fatal(err)
	}
}
