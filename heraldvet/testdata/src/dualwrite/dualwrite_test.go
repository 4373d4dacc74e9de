package dualwrite

import (
	"context"
	"testing"
)

// Tests publish and use transactions side by side on purpose: not
// reported.
func TestPublishesAfterCommit(t *testing.T) {
	s := &service{}
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Publish("orders.placed", nil); err != nil {
		t.Fatal(err)
	}
}
