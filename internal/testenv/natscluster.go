package testenv

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSClusterT is a JetStream cluster of embedded servers, owned by one
// test: every node routes to the others, stores in a directory of its own
// and keeps its ports across [NATSServer.Restart], so a stopped node
// rejoins with its data and clients find it at the same URL.
type NATSClusterT struct {
	// Servers are the nodes, in the order of their names (n1, n2, ...).
	Servers []*NATSServer
	names   []string
}

// NATSCluster starts a JetStream cluster of n nodes on 127.0.0.1, with
// ports from FreePort, and returns once the cluster has a meta leader and
// every node is current, so that streams can be created with up to n
// replicas. The nodes shut down when the test ends.
func NATSCluster(t testing.TB, n int) *NATSClusterT {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: NATSCluster: %d nodes", n)
	}
	clientPorts := make([]int, n)
	routePorts := make([]int, n)
	for i := range n {
		clientPorts[i], routePorts[i] = FreePort(t), FreePort(t)
	}
	c := &NATSClusterT{}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		var routes []*url.URL
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		clusterPort := routePorts[i]
		node := &NATSServer{storeDir: t.TempDir(), port: clientPorts[i], cluster: func(o *server.Options) {
			o.ServerName = name
			o.Cluster = server.ClusterOpts{Name: "herald", Host: "127.0.0.1", Port: clusterPort}
			o.Routes = routes
		}}
		t.Cleanup(node.Stop)
		c.Servers = append(c.Servers, node)
		c.names = append(c.names, name)
	}
	// Each node starts without waiting for the others: a clustered
	// JetStream server is ready for clients before its peers are there.
	for _, node := range c.Servers {
		node.mu.Lock()
		err := node.startLocked()
		node.mu.Unlock()
		if err != nil {
			t.Fatalf("testenv: NATSCluster: %v", err)
		}
	}
	c.WaitReady(t)
	return c
}

// URLs returns the client URLs of every node, comma-separated, as
// nats.Connect takes a cluster's servers.
func (c *NATSClusterT) URLs() string {
	urls := make([]string, len(c.Servers))
	for i, n := range c.Servers {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Server returns the node of the given server name (a stream's
// Cluster.Leader), or nil.
func (c *NATSClusterT) Server(name string) *NATSServer {
	for i, n := range c.names {
		if n == name {
			return c.Servers[i]
		}
	}
	return nil
}

// Name returns the server name of node i.
func (c *NATSClusterT) Name(i int) string { return c.names[i] }

// WaitReady waits until the running nodes agree on a meta leader and each
// is current with it: after a start or a restart, before the test relies
// on the cluster's JetStream API.
func (c *NATSClusterT) WaitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaders, current, running := 0, 0, 0
		for _, n := range c.Servers {
			n.mu.Lock()
			if s := n.srv; s != nil {
				running++
				if s.JetStreamIsLeader() {
					leaders++
				}
				if s.JetStreamIsCurrent() {
					current++
				}
			}
			n.mu.Unlock()
		}
		if leaders == 1 && current == running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: NATSCluster not ready after 30s: %d meta leaders, %d of %d nodes current", leaders, current, running)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
