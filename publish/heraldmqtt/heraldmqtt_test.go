package heraldmqtt_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// brokerAddr is the development machine's Mosquitto.
const brokerAddr = "127.0.0.1:1883"

var names atomic.Int64

// bundle is a test's own corner of a broker: a topic prefix no other test
// uses, and a subscriber to everything under it, subscribed before the test
// publishes (a broker drops a message no subscription wants).
type bundle struct {
	addr   string
	prefix string // ends in '/'
	sub    *subscriber
}

// setup subscribes to a fresh prefix on the machine's Mosquitto. Without
// it the test skips, except with CI=true, where it fails.
func setup(t *testing.T) *bundle {
	t.Helper()
	return setupAt(t, brokerAddr)
}

func setupAt(t *testing.T, addr string) *bundle {
	t.Helper()
	b := &bundle{addr: addr, prefix: fmt.Sprintf("herald-test/%d-%d/", time.Now().UnixNano(), names.Add(1))}
	b.sub = subscribe(t, addr, b.prefix+"#")
	return b
}

// unavailable skips the test for a missing service, or fails it on CI.
func unavailable(t *testing.T, why string) { t.Helper(); testenv.Unavailable(t, why) }

// subscriber is an MQTT 5 client subscribed at QoS 1 that keeps every
// message it receives, by topic name, in arrival order.
type subscriber struct {
	client *paho.Client

	mu      sync.Mutex
	got     map[string][]*paho.Publish
	arrived chan struct{} // closed and replaced on every message
}

func subscribe(t *testing.T, addr, filter string) *subscriber {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		unavailable(t, fmt.Sprintf("Mosquitto is not reachable at %s (%v); start it with `mosquitto -d -c /etc/mosquitto/mosquitto.conf`", addr, err))
	}
	s := &subscriber{got: map[string][]*paho.Publish{}, arrived: make(chan struct{})}
	s.client = paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.got[pr.Packet.Topic] = append(s.got[pr.Packet.Topic], pr.Packet)
			close(s.arrived)
			s.arrived = make(chan struct{})
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ca, err := s.client.Connect(ctx, &paho.Connect{ClientID: fmt.Sprintf("herald-test-sub-%d", names.Add(1)), CleanStart: true, KeepAlive: 30})
	if err != nil {
		unavailable(t, fmt.Sprintf("Mosquitto at %s did not take an MQTT 5 connection (%v); Mosquitto 2.x speaks MQTT 5", addr, err))
	}
	require.NotNil(t, ca)
	t.Cleanup(func() { _ = s.client.Disconnect(&paho.Disconnect{}) })
	_, err = s.client.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	require.NoError(t, err, "subscribing to %s", filter)
	return s
}

// wait waits, up to 10s, until n messages arrived on topic, and returns
// every message of topic received by then.
func (s *subscriber) wait(t *testing.T, topic string, n int) []*paho.Publish {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		got, arrived := append([]*paho.Publish(nil), s.got[topic]...), s.arrived
		s.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-arrived:
		case <-timeout.C:
			require.Failf(t, "messages missing", "received %d of %d messages on %s", len(got), n, topic)
		}
	}
}

// clientConfig is the autopaho configuration of a publisher of addr.
func clientConfig(t *testing.T, addr string) autopaho.ClientConfig {
	t.Helper()
	u, err := url.Parse("mqtt://" + addr)
	require.NoError(t, err)
	return autopaho.ClientConfig{ServerUrls: []*url.URL{u}, ConnectTimeout: 5 * time.Second}
}

// publisher returns a publisher of the bundle's broker publishing under its
// prefix, closed when the test ends.
func (b *bundle) publisher(t *testing.T, cfg *heraldmqtt.Config) *heraldmqtt.Publisher {
	t.Helper()
	c := heraldmqtt.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = b.prefix
	}
	return newPublisher(t, clientConfig(t, b.addr), &c)
}

// newPublisher returns a publisher, closed when the test ends.
func newPublisher(t *testing.T, client autopaho.ClientConfig, cfg *heraldmqtt.Config) *heraldmqtt.Publisher {
	t.Helper()
	c := heraldmqtt.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := heraldmqtt.New(client, &c)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// envelope is a first attempt at an ordered event of topic and key.
func envelope(topic, key string, payload string) herald.Envelope {
	return herald.Envelope{
		Message: herald.Message{ID: herald.NewID(), Topic: topic, Key: key, Payload: []byte(payload)},
		Attempt: 1, Ordered: key != "",
	}
}

// batchErrors returns the per-event errors of err, which must be a
// *herald.BatchError with one per event.
func batchErrors(t *testing.T, err error, n int) []error {
	t.Helper()
	var be *herald.BatchError
	require.ErrorAs(t, err, &be, "per-event results; got %v", err)
	require.Len(t, be.Errs, n)
	return be.Errs
}

// privateBroker is a Mosquitto of the test's own, with settings of its
// own, stopped when the test ends.
type privateBroker struct {
	addr string
	cmd  *exec.Cmd
}

// startMosquitto starts a Mosquitto on a free port of 127.0.0.1 with the
// given configuration lines, and waits until it takes connections. Files
// maps file names to contents, written beside the configuration; "{dir}"
// in conf stands for their directory.
func startMosquitto(t *testing.T, conf string, files map[string]string) *privateBroker {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto" // Debian's package puts it out of a user's PATH
		if _, statErr := os.Stat(bin); statErr != nil {
			unavailable(t, "mosquitto is not installed (apt-get install mosquitto)")
		}
	}
	port := testenv.FreePort(t)

	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	lines := []string{
		"listener " + strconv.Itoa(port) + " 127.0.0.1",
		"allow_anonymous true",
		"persistence false",
		"log_dest none",
	}
	if os.Geteuid() == 0 {
		// Mosquitto started by root switches to the mosquitto user, who
		// cannot read the test's files.
		lines = append(lines, "user root")
	}
	lines = append(lines, strings.ReplaceAll(conf, "{dir}", dir))
	path := filepath.Join(dir, "mosquitto.conf")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

	cmd := exec.Command(bin, "-c", path)
	require.NoError(t, cmd.Start())
	b := &privateBroker{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	t.Cleanup(b.stop)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, 10*time.Second, 20*time.Millisecond, "mosquitto did not start on %s", b.addr)
	return b
}

// stop kills the broker and waits until it is gone. Stopping twice does
// nothing.
func (b *privateBroker) stop() {
	if b.cmd.ProcessState != nil {
		return
	}
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
}

// reasonCode returns the PUBACK reason code err carries.
func reasonCode(t *testing.T, err error) byte {
	t.Helper()
	var re *heraldmqtt.ReasonError
	require.True(t, errors.As(err, &re), "want a PUBACK reason code in %v", err)
	return re.Code
}
