//go:build linux || darwin

package testenv

import (
	"testing"
	"time"
)

// The nodes form one cluster at boot; a node stopped and started again
// rejoins it.
func TestRabbitClusterFormsAndANodeRejoins(t *testing.T) {
	Long(t)
	t.Parallel()
	start := time.Now()
	c := RabbitCluster(t, 3)
	t.Logf("3 nodes in %s", time.Since(start))
	for _, n := range c.Nodes {
		running, err := c.runningNodes(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(running) != 3 {
			t.Fatalf("%s sees %v running", n.Name, running)
		}
	}
	start = time.Now()
	c.Nodes[1].Stop(t)
	t.Logf("stopped in %s", time.Since(start))
	if running, err := c.runningNodes(c.Nodes[0]); err != nil || len(running) != 2 {
		t.Fatalf("after a stop, %s sees %v running (%v)", c.Nodes[0].Name, running, err)
	}
	start = time.Now()
	c.Nodes[1].Start(t)
	c.WaitRunning(t)
	t.Logf("restarted in %s", time.Since(start))
}
