package faultsuite_test

import (
	"testing"

	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	// A child process (a relay or a producer) runs its part and exits here.
	runChildIfAsked()
	testenv.Main(m)
}
