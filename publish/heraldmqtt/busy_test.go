package heraldmqtt_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// refusingBroker is a small MQTT 5 server of the test's own that answers
// some PUBLISHes with a refusing PUBACK and keeps the others: Mosquitto
// sends neither Quota exceeded nor Server busy on demand. It speaks the
// protocol over real TCP with Paho's own packet codec.
type refusingBroker struct {
	ln net.Listener
	// refuse returns the PUBACK reason code of pub, the n-th PUBLISH
	// (from 1), 0 to keep it.
	refuse func(n int64, pub *packets.Publish) byte
	seq    atomic.Int64

	mu      sync.Mutex
	stored  map[string][]*paho.Publish // by topic name, in arrival order
	arrived chan struct{}              // closed and replaced on every stored message
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

func startRefusingBroker(t *testing.T, refuse func(n int64, pub *packets.Publish) byte) *refusingBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &refusingBroker{ln: ln, refuse: refuse, stored: map[string][]*paho.Publish{},
		arrived: make(chan struct{}), conns: map[net.Conn]bool{}}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *refusingBroker) accept() {
	defer b.wg.Done()
	for {
		conn, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns[conn] = true
		b.mu.Unlock()
		b.wg.Add(1)
		go b.serve(conn)
	}
}

// serve answers one client: a CONNACK, a PUBACK per PUBLISH, a PINGRESP
// per PINGREQ, until it disconnects.
func (b *refusingBroker) serve(conn net.Conn) {
	defer b.wg.Done()
	defer conn.Close()
	for {
		cp, err := packets.ReadPacket(conn)
		if err != nil {
			return
		}
		switch p := cp.Content.(type) {
		case *packets.Connect:
			receiveMax := uint16(10)
			_, err = (&packets.Connack{Properties: &packets.Properties{ReceiveMaximum: &receiveMax}}).WriteTo(conn)
		case *packets.Publish:
			code := b.refuse(b.seq.Add(1), p)
			if code == 0 {
				b.keep(p)
			}
			ack := &packets.Puback{PacketID: p.PacketID, ReasonCode: code, Properties: &packets.Properties{}}
			if code != 0 {
				ack.Properties.ReasonString = "refused by the test broker"
			}
			_, err = ack.WriteTo(conn)
		case *packets.Pingreq:
			_, err = (&packets.Pingresp{}).WriteTo(conn)
		case *packets.Disconnect:
			return
		}
		if err != nil {
			return
		}
	}
}

func (b *refusingBroker) keep(p *packets.Publish) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stored[p.Topic] = append(b.stored[p.Topic], paho.PublishFromPacketPublish(p))
	close(b.arrived)
	b.arrived = make(chan struct{})
}

// read waits, up to 10s, until n messages are kept on topic and returns
// every message kept on it by then, parsed.
func (b *refusingBroker) read(t *testing.T, topic string, n int) []publishertest.Received {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		msgs, arrived := append([]*paho.Publish(nil), b.stored[topic]...), b.arrived
		b.mu.Unlock()
		if len(msgs) >= n {
			var got []publishertest.Received
			for _, pub := range msgs {
				m, err := heraldmqtt.Parse(pub)
				require.NoError(t, err)
				got = append(got, publishertest.ReceivedOf(m))
			}
			return got
		}
		select {
		case <-arrived:
		case <-timeout.C:
			require.Failf(t, "messages missing", "kept %d of %d messages on %s", len(msgs), n, topic)
		}
	}
}

func (b *refusingBroker) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Quota exceeded and Server busy cost the event no attempt (Unavailable),
// hold back its key's later events, and leave the other keys alone.
func TestOverloadRefusalsAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, code := range []byte{heraldmqtt.ReasonQuotaExceeded, heraldmqtt.ReasonServerBusy} {
		broker := startRefusingBroker(t, func(_ int64, pub *packets.Publish) byte {
			if string(pub.Payload) == "refused" {
				return code
			}
			return 0
		})
		p := newPublisher(t, clientConfig(t, broker.ln.Addr().String()), nil)
		batch := []herald.Envelope{envelope("busy", "a", "refused"), envelope("busy", "b", "kept"), envelope("busy", "a", "held back")}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.True(t, herald.IsUnavailable(errs[0]), "0x%02x: %v", code, errs[0])
		require.Equal(t, code, reasonCode(t, errs[0]))
		require.ErrorContains(t, errs[0], "refused by the test broker", "the broker's reason string")
		require.NoError(t, errs[1])
		require.ErrorIs(t, errs[2], herald.ErrHeldBack)
		got := broker.read(t, "busy", 1)
		require.Len(t, got, 1)
		require.Equal(t, batch[1].ID, got[0].ID)
	}
}
