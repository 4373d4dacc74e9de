//go:build !linux && !darwin

package testenv

import (
	"runtime"
	"testing"
	"time"
)

// EnvRabbitMQServer names the environment variable holding the path of
// RabbitMQ's rabbitmq-server script, when it is not found by itself.
const EnvRabbitMQServer = "HERALD_TEST_RABBITMQ_SERVER"

// RabbitTLSConfig is what a private RabbitMQ node serves; see the Linux
// and macOS build.
type RabbitTLSConfig struct {
	CertFile, KeyFile, CAFile string
	VerifyClients             bool
	User, Password            string
}

// RabbitNode is a private RabbitMQ node; see the Linux and macOS build.
type RabbitNode struct {
	Addr, Name string
	Boot       time.Duration
}

// RabbitTLS skips the test, or fails it with CI=true: the helper starts
// RabbitMQ nodes on Linux and macOS only.
func RabbitTLS(t testing.TB, _ RabbitTLSConfig) *RabbitNode {
	t.Helper()
	Unavailable(t, "testenv: no private RabbitMQ node on "+runtime.GOOS)
	return nil
}
