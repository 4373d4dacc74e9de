package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSServer is an embedded NATS server with JetStream, owned by one test.
// It keeps its port and store directory across [NATSServer.Restart], so
// clients reconnect to the same URL and find their streams again, as they
// would after a broker outage.
type NATSServer struct {
	storeDir string
	// cluster, when set, makes the server a node of a JetStream cluster
	// (NATSCluster): its name, cluster port and routes.
	cluster func(*server.Options)

	mu   sync.Mutex
	srv  *server.Server
	port int
}

// NATS starts a JetStream server on a random port of 127.0.0.1 and shuts it
// down when the test ends.
func NATS(t testing.TB) *NATSServer {
	t.Helper()
	n := &NATSServer{storeDir: t.TempDir(), port: server.RANDOM_PORT}
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(n.Stop)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.startLocked(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return n
}

func (n *NATSServer) startLocked() error {
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      n.port,
		JetStream: true,
		StoreDir:  n.storeDir,
		NoLog:     true,
		NoSigs:    true,
	}
	if n.cluster != nil {
		n.cluster(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("creating NATS server: %w", err)
	}
	s.Start()
	// With NoLog the server reports a failed listen to nobody, so a timeout
	// here is the only sign of it.
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("NATS server not ready on 127.0.0.1:%d", n.port)
	}
	n.srv = s
	n.port = s.Addr().(*net.TCPAddr).Port
	return nil
}

// URL returns the client URL. It stays the same across restarts.
func (n *NATSServer) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
}

// Stop shuts the server down and waits until it is gone. Clients see an
// outage until [NATSServer.Restart]. Stopping a stopped server does nothing.
func (n *NATSServer) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopLocked()
}

func (n *NATSServer) stopLocked() {
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// Restart stops the server if it is running and starts a new one on the
// same port and store directory, so streams and their messages survive.
func (n *NATSServer) Restart(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopLocked()
	if err := n.startLocked(); err != nil {
		t.Fatalf("testenv: restarting: %v", err)
	}
}

// Conn connects to the server and closes the connection when the test ends.
// The connection reconnects forever and quickly, so that it outlives a
// [NATSServer.Stop] and is back soon after a [NATSServer.Restart].
func (n *NATSServer) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("testenv: connecting to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// CreateStream creates a file-backed stream capturing subjects, with a
// two-minute duplicate window so that republished message ids are dropped.
// The returned handle uses a connection closed when the test ends.
func (n *NATSServer) CreateStream(t testing.TB, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	return n.CreateStreamConfig(t, jetstream.StreamConfig{Name: name, Subjects: subjects})
}

// CreateStreamConfig creates the stream cfg describes, such as one with
// AllowAtomicPublish or a MaxMsgSize. Its storage and duplicate window,
// when left zero, are CreateStream's: file-backed, two minutes.
func (n *NATSServer) CreateStreamConfig(t testing.TB, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(n.Conn(t))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = 2 * time.Minute
	}
	// FileStorage is the zero value: it needs no default.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: creating stream %s: %v", cfg.Name, err)
	}
	return stream
}
