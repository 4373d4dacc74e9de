package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/stretchr/testify/require"
)

// testPKI is a throwaway CA that issues server and client certificates
// for 127.0.0.1, written as PEM files in a directory of the test's. Parallel
// subtests share one: each certificate takes the next serial under mu and
// its files go to a directory of their own, so two certificates of the same
// name never write the same file.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	CAFile string
	pool   *x509.CertPool

	mu     sync.Mutex
	serial int64
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald auth test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	p := &testPKI{dir: t.TempDir(), ca: ca, caKey: key, pool: x509.NewCertPool(), serial: 1}
	p.pool.AddCert(ca)
	p.CAFile = p.write(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return p
}

func (p *testPKI) write(t *testing.T, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	require.NoError(t, os.WriteFile(path, content, 0o600))
	return path
}

// issue signs a certificate for 127.0.0.1, for a server or a client, and
// returns it as a key pair and as the paths of its PEM files.
func (p *testPKI) issue(t *testing.T, name string, client bool) (pair tls.Certificate, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	p.mu.Lock()
	p.serial++
	serial := p.serial
	p.mu.Unlock()
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	own := fmt.Sprintf("%s-%d", name, serial)
	require.NoError(t, os.Mkdir(filepath.Join(p.dir, own), 0o700))
	return pair, p.write(t, filepath.Join(own, name+".pem"), certPEM), p.write(t, filepath.Join(own, name+".key"), keyPEM)
}

// serverTLS is a server's TLS configuration; mutual asks for a client
// certificate this CA signed.
func (p *testPKI) serverTLS(t *testing.T, mutual bool) *tls.Config {
	t.Helper()
	pair, _, _ := p.issue(t, "server", false)
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if mutual {
		cfg.ClientCAs, cfg.ClientAuth = p.pool, tls.RequireAndVerifyClientCert
	}
	return cfg
}

// relayWithSecrets runs a relay with env and args until it has published n
// events, reads its /metrics and admin page, stops it, and checks that no
// secret shows in its output, its logs, the metrics or the page.
func relayWithSecrets(t *testing.T, d db, n int, env map[string]string, secrets []string, args ...string) result {
	t.Helper()
	addr := freeAddr(t)
	r := start(t, env, append(append([]string{"relay", "--admin-addr", addr, "--log-level", "debug",
		"--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, args...), d.flags...)...)
	waitPublished(t, d, n)
	var metrics string
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/metrics")
		metrics = body
		return err == nil && code == 200 && strings.Contains(body, "herald_published_total")
	}, 30*time.Second, 20*time.Millisecond)
	code, page, err := get(addr, "/")
	require.NoError(t, err)
	require.Equal(t, 200, code)
	_, destinations, err := get(addr, "/destinations")
	require.NoError(t, err)
	res := r.stop(t)
	require.Equal(t, 0, res.code, res)
	for _, secret := range secrets {
		for what, text := range map[string]string{"stderr": res.stderr, "stdout": res.stdout, "/metrics": metrics, "/": page, "/destinations": destinations} {
			require.NotContains(t, text, secret, "a secret leaked into %s", what)
		}
	}
	return res
}

// refusedAtStart runs a relay that must stop at once, before relaying,
// with one line that says says, and no secret in its output.
func refusedAtStart(t *testing.T, d db, env map[string]string, says string, secrets []string, args ...string) {
	t.Helper()
	// Were the relay to wait for the destination, the deadline would stop
	// it with 0.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := cliCtx(ctx, env, nil, append(append([]string{"relay", "--log-level", "warn"}, args...), d.flags...)...)
	require.Equal(t, 1, r.code, r)
	// The client library's own lines (lib=franz-go: the handshake it was
	// refused) may come between Herald's.
	var lines []string
	for line := range strings.SplitSeq(strings.TrimSpace(r.stderr), "\n") {
		if !strings.Contains(line, " lib=") {
			lines = append(lines, line)
		}
	}
	// Under TLS 1.3 a server refuses the client's certificate after the
	// handshake: a client that writes first may see the connection closed
	// instead of the alert, which reads as a broker going away, and tries
	// again; each try loses that race at random, more often on a loaded
	// machine. So a few waits, each a TLS connection closed early, may
	// precede the refusal: never another kind, and never the relay's
	// waiting out its whole start.
	waits := lines[:len(lines)-1]
	require.LessOrEqual(t, len(waits), 5, "it does not wait: %s", r)
	for _, w := range waits {
		require.Contains(t, w, "waiting for the destination", r)
		require.Contains(t, w, "tls", "only a TLS handshake closed early is retried: %s", r)
	}
	require.Contains(t, lines[len(lines)-1], says, r)
	for _, secret := range secrets {
		require.NotContains(t, r.stdout+r.stderr, secret, "a secret leaked")
	}
}

// The secret variables of a destination: one scheme for every broker.
func TestDestinationSecretVariablesFollowOneScheme(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ep   endpoint
		want string
	}{
		{endpoint{kind: "kafka", name: "default", publisher: true}, "HERALD_KAFKA_PASSWORD"},
		{endpoint{kind: "nats", name: "default", publisher: true}, "HERALD_NATS_PASSWORD"},
		{endpoint{kind: "kafka", name: "default"}, "HERALD_DESTINATION_DEFAULT_PASSWORD"},
		{endpoint{kind: "kafka", name: "billing-events"}, "HERALD_DESTINATION_BILLING_EVENTS_PASSWORD"},
	} {
		require.Equal(t, tc.want, tc.ep.secretEnv("PASSWORD"))
	}
}

// A kafka:// or nats:// URL's options and secrets are checked before the
// relay waits for anything (its database here is unreachable): an option
// the daemon does not know, a file it cannot read, or a secret given twice
// or for nothing is refused in one line naming it, never ignored.
func TestKafkaAndNATSDestinationOptionsAreChecked(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-Secret"
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.txt")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate, nor a seed\n"), 0o600))
	_, seed := testenv.NATSUser(t)
	seedOnly := filepath.Join(dir, "seed-only.creds")
	require.NoError(t, os.WriteFile(seedOnly, seed, 0o600))
	pki := newTestPKI(t)
	_, cert, _ := pki.issue(t, "client", true)
	pub := func(raw string) []string { return []string{"--publisher", raw} }
	dest := func(raw string) []string { return []string{"--destination", "billing-events=" + raw} }
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		says string
	}{
		{"KafkaUnknownOption", nil, pub("kafka://127.0.0.1:9092?sasl_mechanism=plain"),
			`--publisher: option "sasl_mechanism" is not known: a kafka:// URL takes sasl, tls, transactional, transactional_id, ca_file, cert_file, key_file`},
		{"KafkaUserInformationWithoutSASL", nil, pub("kafka://herald:" + secret + "@127.0.0.1:9092"),
			"--publisher: the URL names a user but no SASL mechanism: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512"},
		{"KafkaPasswordVariableWithoutSASL", map[string]string{"HERALD_KAFKA_PASSWORD": secret}, pub("kafka://127.0.0.1:9092"),
			"--publisher: HERALD_KAFKA_PASSWORD is set but the URL has no sasl="},
		{"KafkaUnknownMechanism", nil, pub("kafka://herald@127.0.0.1:9092?sasl=gssapi"),
			`--publisher: sasl="gssapi" is not supported: use plain, scram-sha-256, scram-sha-512`},
		{"KafkaSASLWithoutUser", nil, pub("kafka://127.0.0.1:9092?sasl=plain"),
			"--publisher: sasl=plain needs a user name: kafka://USER@HOST:PORT, its password in HERALD_KAFKA_PASSWORD"},
		{"KafkaSASLWithoutPassword", nil, dest("kafka://herald@127.0.0.1:9092?sasl=scram-sha-512"),
			"--destination billing-events: sasl=scram-sha-512 needs a password in HERALD_DESTINATION_BILLING_EVENTS_PASSWORD (or a file named by HERALD_DESTINATION_BILLING_EVENTS_PASSWORD_FILE)"},
		{"KafkaPasswordTwice", map[string]string{"HERALD_KAFKA_PASSWORD": "other-" + secret}, pub("kafka://herald:" + secret + "@127.0.0.1:9092?sasl=plain"),
			"--publisher: the URL holds a password and HERALD_KAFKA_PASSWORD is set: give one"},
		{"KafkaPasswordFileMissing", map[string]string{"HERALD_KAFKA_PASSWORD_FILE": missing}, pub("kafka://herald@127.0.0.1:9092?sasl=plain"),
			"HERALD_KAFKA_PASSWORD_FILE names " + missing + ", which cannot be read: no such file or directory"},
		{"KafkaCAFileMissing", nil, pub("kafka://127.0.0.1:9092?ca_file=" + missing),
			"--publisher: ca_file=" + missing + ": cannot read it: no such file or directory"},
		{"KafkaCAFileWithoutCertificate", nil, pub("kafka://127.0.0.1:9092?ca_file=" + garbage),
			"--publisher: ca_file=" + garbage + ": no PEM certificate in the file"},
		{"KafkaCertificateWithoutKey", nil, pub("kafka://127.0.0.1:9092?cert_file=" + cert),
			"--publisher: cert_file and key_file go together"},
		{"KafkaKeyFileMissing", nil, pub("kafka://127.0.0.1:9092?cert_file=" + cert + "&key_file=" + missing),
			"--publisher: key_file=" + missing + ": cannot read it"},
		{"KafkaTLSNotABoolean", nil, pub("kafka://127.0.0.1:9092?tls=yes-please"), `--publisher: tls="yes-please": use true or false`},
		{"KafkaTLSOffWithACAFile", nil, pub("kafka://127.0.0.1:9092?tls=false&ca_file=" + pki.CAFile),
			"--publisher: tls=false goes with no ca_file, cert_file or key_file"},
		{"KafkaEmptyOption", nil, pub("kafka://127.0.0.1:9092?ca_file="), "--publisher: option ca_file has no value"},
		{"KafkaOptionsDifferBetweenURLs", nil, pub("kafka://h1:9092?tls=true,kafka://h2:9092?tls=false"),
			"--publisher: option tls differs between the URLs of one destination"},
		{"KafkaUsersDifferBetweenURLs", nil, pub("kafka://a@h1:9092?sasl=plain,kafka://b@h2:9092"),
			"--publisher: the URLs of one destination give different user information"},
		{"NATSUnknownOption", nil, dest("nats://127.0.0.1:4222?tls_ca=/etc/ca.pem"),
			`--destination billing-events: option "tls_ca" is not known: a nats:// URL takes creds_file, nkey_file, ca_file, cert_file, key_file`},
		{"NATSCredsFileMissing", nil, pub("nats://127.0.0.1:4222?creds_file=" + missing),
			"--publisher: creds_file=" + missing + ": cannot read it: no such file or directory"},
		{"NATSCredsFileWithoutCredentials", nil, pub("nats://127.0.0.1:4222?creds_file=" + garbage),
			"--publisher: creds_file=" + garbage + ": no nkey seed in the file"},
		{"NATSCredsFileWithASeedOnly", nil, pub("nats://127.0.0.1:4222?creds_file=" + seedOnly),
			"--publisher: creds_file=" + seedOnly + ": the file's JWT is not a user's"},
		{"NATSNkeyFileWithoutSeed", nil, pub("nats://127.0.0.1:4222?nkey_file=" + garbage),
			"--publisher: nkey_file=" + garbage + ": no nkey seed in the file"},
		{"NATSTwoWaysToAuthenticate", nil, pub("nats://herald:" + secret + "@127.0.0.1:4222?nkey_file=" + seedOnly),
			"--publisher: give one way to authenticate, not a user and password and nkey_file"},
		{"NATSUserAndToken", map[string]string{"HERALD_NATS_TOKEN": secret}, pub("nats://herald:pw@127.0.0.1:4222"),
			"--publisher: give one way to authenticate, not a user and password and HERALD_NATS_TOKEN"},
		{"NATSPasswordVariableWithoutUser", map[string]string{"HERALD_DESTINATION_BILLING_EVENTS_PASSWORD": secret}, dest("nats://127.0.0.1:4222"),
			"--destination billing-events: HERALD_DESTINATION_BILLING_EVENTS_PASSWORD is set but the URL names no user"},
		{"NATSPasswordTwice", map[string]string{"HERALD_NATS_PASSWORD": secret}, pub("nats://herald:pw@127.0.0.1:4222"),
			"--publisher: the URL holds a password and HERALD_NATS_PASSWORD is set: give one"},
		{"NATSTLSOptionsOnPlainWebSocket", nil, pub("ws://127.0.0.1:4222?ca_file=" + pki.CAFile),
			"--publisher: TLS options go with nats://, tls:// or wss://, not ws://"},
		{"FromTheEnvironmentTheVariableIsNamed", map[string]string{"HERALD_PUBLISHER": "kafka://127.0.0.1:9092?sasl=plain"}, nil,
			"HERALD_PUBLISHER: sasl=plain needs a user name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r := cliCtx(ctx, tc.env, nil, append([]string{"relay", "--db", "postgres://127.0.0.1:1/db"}, tc.args...)...)
			require.Equal(t, 2, r.code, r)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r)
			require.Contains(t, r.stderr, "herald: "+tc.says, r)
			require.NotContains(t, r.stdout+r.stderr, secret, "a secret reached the output")
		})
	}
}
