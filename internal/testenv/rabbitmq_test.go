//go:build linux || darwin

package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	parsed, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(parsed)
	return cert, key, pool
}

// A private node speaks AMQP over TLS with the configured certificate, and
// is gone, with every process of its group, once its test ended.
func TestRabbitTLS(t *testing.T) {
	Long(t)
	t.Parallel()
	cert, key, pool := selfSigned(t)
	var node *RabbitNode
	t.Run("ServesAMQPOverTLSOnly", func(t *testing.T) {
		node = RabbitTLS(t, RabbitTLSConfig{CertFile: cert, KeyFile: key, CAFile: cert, User: "u", Password: "p"})
		t.Logf("node %s booted in %s", node.Name, node.Boot.Round(time.Millisecond))
		c, err := tls.Dial("tcp", node.Addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		require.NoError(t, err, "the handshake verified the configured certificate")
		defer c.Close()
		// A protocol header the node does not speak: it answers with the
		// one it does, AMQP 0-9-1.
		_, err = c.Write([]byte("AMQP\x00\x00\x09\x02"))
		require.NoError(t, err)
		answer := make([]byte, 8)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = io.ReadFull(c, answer)
		require.NoError(t, err)
		require.Equal(t, "AMQP\x00\x00\x09\x01", string(answer))
	})
	if node == nil {
		return
	}
	_, err := net.DialTimeout("tcp", node.Addr, time.Second)
	require.Error(t, err, "the listener is closed")
	require.True(t, errors.Is(syscall.Kill(-node.cmd.Process.Pid, 0), syscall.ESRCH), "no process of the node's group is left")
}
