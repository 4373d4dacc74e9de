//go:build linux || darwin

package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pubsubStartTimeout bounds the emulator's start: a Java program, which
// takes seconds even on an idle machine.
const pubsubStartTimeout = 90 * time.Second

// PubSubEmulator starts Google's Pub/Sub emulator (gcloud beta emulators
// pubsub start) on a free port of 127.0.0.1, empty, and stops it when the
// test ends. It returns the emulator's host:port, as PUBSUB_EMULATOR_HOST
// names it. Without gcloud and its pubsub-emulator component (and Java)
// the test skips, except with CI=true, where it fails.
func PubSubEmulator(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("gcloud")
	if err != nil {
		Unavailable(t, fmt.Sprintf("gcloud is not in PATH (%v); install the Google Cloud CLI "+
			"with its pubsub-emulator component and Java", err))
	}
	// Another listener may take the free port before the emulator binds
	// it: the emulator then exits, and another port is tried.
	var last error
	for range 3 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
		p, err := startPubSub(t, bin, addr)
		if err == nil {
			t.Cleanup(p.stop)
			return addr
		}
		p.stop()
		last = err
	}
	t.Fatalf("testenv: %v", last)
	return ""
}

// pubsubProcess is a running emulator, which stop kills.
type pubsubProcess struct{ MotoServer }

func startPubSub(t testing.TB, bin, addr string) (*pubsubProcess, error) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "pubsub.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating the emulator's log: %w", err)
	}
	cmd := exec.Command(bin, "beta", "emulators", "pubsub", "start", "--quiet",
		"--host-port="+addr, "--data-dir="+dir)
	// An *os.File is handed to the child as is: no copying goroutine.
	cmd.Stdout, cmd.Stderr = logf, logf
	attr := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(attr)
	cmd.SysProcAttr = attr
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the Pub/Sub emulator: %w", err)
	}
	// The process is reaped and killed as moto_server is.
	p := &pubsubProcess{MotoServer{cmd: cmd}}
	deadline := time.Now().Add(pubsubStartTimeout)
	for {
		out, _ := os.ReadFile(logPath)
		switch {
		case strings.Contains(string(out), "Server started, listening on"):
			return p, nil
		case p.exited():
			return p, errors.New("the Pub/Sub emulator exited during startup:\n" + lastLines(logPath, 20))
		case time.Now().After(deadline):
			return p, fmt.Errorf("the Pub/Sub emulator not listening after %s:\n%s", pubsubStartTimeout, lastLines(logPath, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
