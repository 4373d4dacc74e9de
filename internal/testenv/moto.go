//go:build linux || darwin

package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// EnvMoto names the environment variable holding the path of moto_server,
// when it is not in PATH.
const EnvMoto = "HERALD_TEST_MOTO"

// MotoServer is a moto_server process, an emulator of AWS services (SQS
// and SNS among them) that speaks their real protocols, owned by one
// test. Its state is in memory: every server starts empty.
type MotoServer struct {
	// URL is the endpoint to give the AWS SDK clients (BaseEndpoint), such
	// as http://127.0.0.1:41234. Any region and any static credentials
	// work; the account id is 123456789012.
	URL string

	cmd    *exec.Cmd
	reaped bool
}

// motoListening is the line moto_server logs once it listens, with the
// port it got.
var motoListening = regexp.MustCompile(`Running on (http://127\.0\.0\.1:[0-9]+)`)

// Moto starts moto_server on a random port of 127.0.0.1 and kills it when
// the test ends. Without moto_server (the Python package moto, with its
// server extras) the test skips, except with CI=true, where it fails. env
// are NAME=VALUE settings of the server's own, added to the test's
// environment: INITIAL_NO_AUTH_ACTION_COUNT=0 makes it check credentials
// (it knows none but the ones its IAM creates).
func Moto(t testing.TB, env ...string) *MotoServer {
	t.Helper()
	bin := os.Getenv(EnvMoto)
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("moto_server"); err != nil {
			Unavailable(t, fmt.Sprintf("moto_server is not in PATH and %s is not set (%v); "+
				"install the Python package moto[server]", EnvMoto, err))
		}
	}
	logPath := filepath.Join(t.TempDir(), "moto.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatalf("testenv: creating moto log: %v", err)
	}
	// Port 0: the kernel picks a free port, and the server says which.
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", "0")
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// An *os.File is handed to the child as is; any other writer would
	// need a copying goroutine, which goleak would report.
	cmd.Stdout, cmd.Stderr = logf, logf
	attr := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(attr)
	cmd.SysProcAttr = attr
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		t.Fatalf("testenv: starting moto_server: %v", err)
	}
	m := &MotoServer{cmd: cmd}
	t.Cleanup(m.stop)
	if m.URL, err = m.await(logPath); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return m
}

// await waits until the server logs the address it listens on. Werkzeug
// logs it after the socket listens, so the server takes requests from
// then on.
func (m *MotoServer) await(logPath string) (string, error) {
	deadline := time.Now().Add(startTimeout)
	for {
		out, _ := os.ReadFile(logPath)
		if match := motoListening.FindSubmatch(out); match != nil {
			return string(match[1]), nil
		}
		if m.exited() {
			return "", fmt.Errorf("moto_server exited during startup:\n%s", lastLines(logPath, 20))
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("moto_server not listening after %s:\n%s", startTimeout, lastLines(logPath, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited reports, without blocking, whether the server has exited.
func (m *MotoServer) exited() bool {
	pid := m.cmd.Process.Pid
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if got == pid || errors.Is(err, syscall.ECHILD) {
		m.reaped = true
		_ = m.cmd.Process.Release()
		return true
	}
	return false
}

// stop kills the server's process group (the PATH entry may be a wrapper
// script that started it) and reaps it.
func (m *MotoServer) stop() {
	if m.reaped {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	_ = m.cmd.Wait()
	m.reaped = true
}
