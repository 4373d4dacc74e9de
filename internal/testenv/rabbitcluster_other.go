//go:build !linux && !darwin

package testenv

import (
	"errors"
	"runtime"
	"testing"
)

// RabbitClusterT is a RabbitMQ cluster of one test's own; see the Linux
// and macOS build.
type RabbitClusterT struct {
	Nodes []*RabbitClusterNode
}

// RabbitClusterNode is one node of a RabbitClusterT; see the Linux and
// macOS build.
type RabbitClusterNode struct {
	Name, Addr string
}

// URL is the node's AMQP URL.
func (n *RabbitClusterNode) URL() string { return "amqp://guest:guest@" + n.Addr + "/" }

// Running reports whether the node runs.
func (n *RabbitClusterNode) Running() bool { return false }

// Stop, Kill and Start do nothing: no node runs here.
func (n *RabbitClusterNode) Stop(testing.TB)  {}
func (n *RabbitClusterNode) Kill(testing.TB)  {}
func (n *RabbitClusterNode) Start(testing.TB) {}

// URLs are the nodes' AMQP URLs, comma-separated.
func (c *RabbitClusterT) URLs() string { return "" }

// Node returns nil: no node runs here.
func (c *RabbitClusterT) Node(string) *RabbitClusterNode { return nil }

// WaitRunning does nothing: no node runs here.
func (c *RabbitClusterT) WaitRunning(testing.TB) {}

// Ctl fails: no node runs here.
func (c *RabbitClusterT) Ctl(*RabbitClusterNode, ...string) (string, error) {
	return "", errors.New("testenv: no private RabbitMQ cluster on " + runtime.GOOS)
}

// RabbitCluster skips the test, or fails it with CI=true: the helper
// starts RabbitMQ nodes on Linux and macOS only.
func RabbitCluster(t testing.TB, _ int) *RabbitClusterT {
	t.Helper()
	Unavailable(t, "testenv: no private RabbitMQ cluster on "+runtime.GOOS)
	return nil
}
