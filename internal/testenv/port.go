package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreeAddr returns an address of 127.0.0.1 that nothing listens on, for a
// server a test starts (a relay's admin server): FreePort's port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FreePort returns a port of 127.0.0.1 that nothing listens on, for a
// server a test starts, in process or as another program (Mosquitto, a
// private Redis). Unlike listening on port 0, it is not from the kernel's
// ephemeral range, where every outgoing connection of the machine's other
// tests takes its source port: see freePort.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: finding a free port: %v", err)
	}
	return port
}

// freePort returns a port of 127.0.0.1 that nothing listens on, for a
// server the test starts as another process. It is chosen below the
// kernel's ephemeral range: a port from that range (what listening on
// port 0 returns) can be taken between this check and the server's bind
// by any outgoing connection of the machine, which the kernel gives a
// source port from the same range. Below it, only another listener can
// take the port, and the callers retry when that happens.
func freePort() (int, error) {
	low := ephemeralLow()
	const first = 10000
	if low-first < 1000 {
		return listenPort(0)
	}
	var err error
	for range 100 {
		var port int
		port, err = listenPort(first + rand.IntN(low-first))
		if err == nil {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port in %d-%d: %w", first, low-1, err)
}

// ephemeralLow is the first port of the kernel's ephemeral range: Linux
// says it in /proc; elsewhere the IANA range's start is assumed.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 49152
}

func listenPort(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
