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
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/publish/heraldrabbit"
	"github.com/herald-outbox/herald/publish/heraldredis"
)

// authPKI is a throwaway certificate authority of a test, and the files of
// a server certificate for 127.0.0.1 and a client certificate it signed,
// with a second CA that signed nothing the servers use.
type authPKI struct {
	dir                           string
	ca, otherCA                   string // PEM files
	serverCert, serverKey         string
	clientCert, clientKey         string
	pool                          *x509.CertPool
	server, client                tls.Certificate
	clientSubject, serverHostname string
}

func newAuthPKI(t *testing.T) *authPKI {
	t.Helper()
	dir := t.TempDir()
	p := &authPKI{dir: dir, pool: x509.NewCertPool(), clientSubject: "herald relay test client", serverHostname: "127.0.0.1"}
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
			BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		require.NoError(t, err)
		cert, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, b, 0o600))
		return path
	}
	ca, caKey, caPEM := newCA("herald auth test CA")
	_, _, otherPEM := newCA("another CA")
	p.pool.AddCert(ca)
	p.ca, p.otherCA = write("ca.pem", caPEM), write("other-ca.pem", otherPEM)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (tls.Certificate, []byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		return pair, certPEM, keyPEM
	}
	var certPEM, keyPEM []byte
	p.server, certPEM, keyPEM = leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	p.serverCert, p.serverKey = write("server.pem", certPEM), write("server.key", keyPEM)
	p.client, certPEM, keyPEM = leaf(3, p.clientSubject, x509.ExtKeyUsageClientAuth)
	p.clientCert, p.clientKey = write("client.pem", certPEM), write("client.key", keyPEM)
	return p
}

// query is the TLS options of a URL: ca_file, and the client certificate
// when mutual.
func (p *authPKI) query(mutual bool) string {
	q := "ca_file=" + url.QueryEscape(p.ca)
	if mutual {
		q += "&cert_file=" + url.QueryEscape(p.clientCert) + "&key_file=" + url.QueryEscape(p.clientKey)
	}
	return q
}

// secretFile writes a secret to a file of the test, with a final line
// break as editors leave it, and returns its path.
func secretFile(t *testing.T, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, []byte(secret+"\n"), 0o600))
	return path
}

// failsAtOnce runs herald with args and env, which must end by itself
// with code, one line on stderr containing says, and none of secrets.
// Were it to wait (for its database, for a broker), the deadline would
// stop it with 0. The deadline is generous: under TLS 1.3 a server refuses
// a client certificate after the handshake, and a client that wrote first
// sees a closed connection, retried with backoff, before it reads the
// alert; on a loaded machine that can take a few tries.
func failsAtOnce(t *testing.T, env map[string]string, args []string, code int, says string, secrets ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := cliCtx(ctx, env, nil, args...)
	require.Equal(t, code, r.code, r)
	require.Contains(t, r.stderr, says, r)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
	for _, s := range secrets {
		require.NotContains(t, r.stderr+r.stdout, s)
	}
}

// A redis(s):// or amqp(s):// URL's options, TLS files and passwords, and
// the webhooks' secrets, are checked before the relay waits for its
// database: every mistake is one line naming the option or the variable
// (and the file), never the secret.
func TestDestinationAuthMistakesGiveOneClearLine(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-Secret"
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	pki := newAuthPKI(t)
	junk := filepath.Join(t.TempDir(), "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o600))
	unreadable := filepath.Join(t.TempDir(), "missing", "ca.pem")
	db := "postgres://127.0.0.1:1/db"
	redisURL := "rediss://relay-user:" + secret + "@127.0.0.1:1/0?"
	amqpURL := "amqps://relay-user:" + secret + "@127.0.0.1:1/?"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		says string
	}{
		{"RedisUnknownOption", nil, []string{"--publisher", redisURL + "stream=x"},
			`herald: --publisher: option "stream" is not known: a redis(s):// URL takes maxlen, ca_file, cert_file, key_file (the last three for rediss:// only), and the client's db, protocol, client_name, dial_timeout`},
		{"RedisSkipVerify", nil, []string{"--publisher", redisURL + "skip_verify=true"},
			"herald: --publisher: option skip_verify is refused: Herald verifies the server's certificate; trust a private CA with ca_file="},
		{"RedisOptionTwice", nil, []string{"--publisher", redisURL + "maxlen=1&maxlen=2"}, "herald: --publisher: option maxlen is given twice"},
		{"RedisBadClientOption", nil, []string{"--publisher", redisURL + "dial_timeout=soon"}, "herald: --publisher: invalid dial_timeout duration"},
		{"RedisBadMaxLen", nil, []string{"--destination", "cache=" + redisURL + "maxlen=0"}, `herald: --destination cache: maxlen="0" is not a positive number`},
		{"RedisTLSFilesWithoutTLS", nil, []string{"--publisher", "redis://127.0.0.1:1?" + pki.query(false)},
			"herald: --publisher: ca_file, cert_file and key_file are for rediss:// (TLS) only"},
		{"RedisUnreadableCAFile", nil, []string{"--publisher", redisURL + "ca_file=" + url.QueryEscape(unreadable)},
			"herald: --publisher: ca_file=" + unreadable + ": cannot read it: no such file or directory"},
		{"RedisCAFileWithoutACertificate", nil, []string{"--publisher", redisURL + "ca_file=" + url.QueryEscape(junk)},
			"herald: --publisher: ca_file=" + junk + ": no PEM certificate in the file"},
		{"RedisCertWithoutKey", nil, []string{"--publisher", redisURL + "cert_file=" + url.QueryEscape(pki.clientCert)},
			"herald: --publisher: cert_file and key_file go together"},
		{"RedisKeyOfAnotherCertificate", nil, []string{"--publisher", redisURL + "cert_file=" + url.QueryEscape(pki.clientCert) + "&key_file=" + url.QueryEscape(pki.serverKey)},
			"herald: --publisher: cert_file=" + pki.clientCert + " and key_file=" + pki.serverKey + " are not a certificate and its key: private key does not match public key"},
		{"RedisPasswordInURLAndVariable", map[string]string{"HERALD_REDIS_PASSWORD": secret}, []string{"--publisher", redisURL},
			"herald: --publisher: the URL holds a password and HERALD_REDIS_PASSWORD is set; give one"},
		{"RedisPasswordFileUnreadable", map[string]string{"HERALD_DESTINATION_CACHE_EU_PASSWORD_FILE": unreadable},
			[]string{"--destination", "cache-eu=rediss://relay-user@127.0.0.1:1"},
			"herald: HERALD_DESTINATION_CACHE_EU_PASSWORD_FILE names " + unreadable + ", which cannot be read: no such file or directory"},
		{"AMQPUnknownOption", nil, []string{"--destination", "rabbit=" + amqpURL + "prefetch=10"},
			`herald: --destination rabbit: option "prefetch" is not known: an amqp(s):// URL takes exchange, ca_file, cert_file, key_file (the last three for amqps:// only), and the client's heartbeat, connection_timeout, channel_max`},
		{"AMQPRabbitMQsSpellingOfATLSOption", nil, []string{"--publisher", amqpURL + "cacertfile=" + url.QueryEscape(pki.ca)},
			"herald: --publisher: option cacertfile: write it ca_file= (Herald's name for it)"},
		{"AMQPTLSFilesWithoutTLS", nil, []string{"--publisher", "amqp://127.0.0.1:1/?" + pki.query(true)},
			"herald: --publisher: ca_file, cert_file and key_file are for amqps:// (TLS) only"},
		{"AMQPUnreadableKeyFile", nil, []string{"--publisher", amqpURL + "cert_file=" + url.QueryEscape(pki.clientCert) + "&key_file=" + url.QueryEscape(unreadable)},
			"herald: --publisher: key_file=" + unreadable + ": cannot read it: no such file or directory"},
		{"AMQPBadHeartbeat", nil, []string{"--publisher", amqpURL + "heartbeat=often"}, "herald: --publisher: heartbeat is not an uint16"},
		{"AMQPExchangeTwice", nil, []string{"--publisher", amqpURL + "exchange=a&exchange=b"}, "herald: --publisher: option exchange is given twice"},
		{"AMQPPasswordInURLAndVariable", map[string]string{"HERALD_DESTINATION_RABBIT_PASSWORD": secret}, []string{"--destination", "rabbit=" + amqpURL},
			"herald: --destination rabbit: the URL holds a password and HERALD_DESTINATION_RABBIT_PASSWORD is set; give one"},
		{"AMQPPublisherPasswordFileAndVariable", map[string]string{"HERALD_AMQP_PASSWORD": secret, "HERALD_AMQP_PASSWORD_FILE": junk},
			[]string{"--publisher", "amqps://relay-user@127.0.0.1:1/"}, "herald: HERALD_AMQP_PASSWORD and HERALD_AMQP_PASSWORD_FILE are both set: give one"},
		{"WebhookPreviousSecretWithoutItsSecret", map[string]string{"HERALD_WEBHOOK_SECRET": whsec, "HERALD_DESTINATION_HOOK_PREVIOUS_SECRET": whsec},
			[]string{"--destination", "hook=https://hooks.example/x"},
			"herald: destination hook: HERALD_DESTINATION_HOOK_PREVIOUS_SECRET goes with HERALD_DESTINATION_HOOK_SECRET, the secret that replaces it"},
		{"WebhookPreviousSecretSameAsSecret", map[string]string{"HERALD_WEBHOOK_SECRET": whsec, "HERALD_WEBHOOK_PREVIOUS_SECRET": whsec},
			[]string{"--publisher", "https://hooks.example/x"},
			"herald: destination default: HERALD_WEBHOOK_PREVIOUS_SECRET is the same as HERALD_WEBHOOK_SECRET; give the retiring secret"},
		{"WebhookBadOwnSecret", map[string]string{"HERALD_WEBHOOK_SECRET": whsec, "HERALD_DESTINATION_HOOK_SECRET": secret},
			[]string{"--destination", "hook=https://hooks.example/x"},
			`herald: destination hook: HERALD_DESTINATION_HOOK_SECRET must start with "whsec_" (a Standard Webhooks secret)`},
		{"WebhookPreviousSecretFileUnreadable", map[string]string{"HERALD_WEBHOOK_SECRET": whsec, "HERALD_WEBHOOK_PREVIOUS_SECRET_FILE": unreadable},
			[]string{"--publisher", "https://hooks.example/x"}, "herald: HERALD_WEBHOOK_PREVIOUS_SECRET_FILE names " + unreadable + ", which cannot be read"},
		{"NamesSpellingOneVariable", nil, []string{"--destination", "cache-eu=redis://127.0.0.1:1", "--destination", "cache_eu=redis://127.0.0.1:2",
			"--default-destination", "cache-eu"},
			"herald: --destination: destinations cache-eu and cache_eu would share the variable HERALD_DESTINATION_CACHE_EU_PASSWORD; rename one"},
		{"ANameAndItsPreviousSecret", map[string]string{"HERALD_WEBHOOK_SECRET": whsec},
			[]string{"--destination", "hook=https://hooks.example/a", "--destination", "hook_previous=https://hooks.example/b", "--default-destination", "hook"},
			"herald: --destination: destinations hook and hook_previous would share the variable HERALD_DESTINATION_HOOK_PREVIOUS_SECRET; rename one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failsAtOnce(t, tc.env, append([]string{"relay", "--db", db}, tc.args...), 2, tc.says, secret)
		})
	}
}

// The options the daemon passes on reach the client, Herald's own are
// taken out, and the password comes from the variable.
func TestRedisAndAMQPDestinationsConfigureTheirClients(t *testing.T) {
	t.Parallel()
	pki := newAuthPKI(t)
	const password = "from-the-variable-0042"
	inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay"),
		getenv: func(name string) (string, bool) {
			if name == "HERALD_DESTINATION_CACHE_PASSWORD" || name == "HERALD_AMQP_PASSWORD" {
				return password, true
			}
			return "", false
		}}

	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		ep, err := parseEndpoint(inv, "--destination cache", "cache",
			"rediss://herald@127.0.0.1:6390/2?client_name=relay&dial_timeout=3s&maxlen=50&"+pki.query(true))
		require.NoError(t, err)
		d, ok := ep.spec.Target().(*heraldredis.URLConfig)
		require.True(t, ok, "a redis destination parses into a *heraldredis.URLConfig, not %T", ep.spec.Target())
		require.Equal(t, "herald", d.Options.Username)
		require.Equal(t, password, d.Options.Password)
		require.Equal(t, 2, d.Options.DB)
		require.Equal(t, "relay", d.Options.ClientName)
		require.Equal(t, 3*time.Second, d.Options.DialTimeout)
		require.EqualValues(t, 50, d.Config.MaxLen)
		require.Equal(t, "127.0.0.1", d.Options.TLSConfig.ServerName)
		require.False(t, d.Options.TLSConfig.InsecureSkipVerify)
		require.Len(t, d.Options.TLSConfig.Certificates, 1)
		require.True(t, d.Options.TLSConfig.RootCAs.Equal(pki.pool), "the CA of ca_file only")
	})

	t.Run("AMQP", func(t *testing.T) {
		t.Parallel()
		ep, err := parseEndpoint(inv, inv.flags.label("publisher"), "default",
			"amqps://herald@127.0.0.1:5671/orders?heartbeat=5&exchange=events&"+pki.query(false))
		require.NoError(t, err)
		d, ok := ep.spec.Target().(*heraldrabbit.URLConfig)
		require.True(t, ok, "an amqp destination parses into a *heraldrabbit.URLConfig, not %T", ep.spec.Target())
		require.Equal(t, "events", d.Config.Exchange)
		require.Equal(t, "amqps://herald@127.0.0.1:5671/orders?heartbeat=5", d.URI, "Herald's options are taken out")
		require.Len(t, d.Client.SASL, 1)
		require.Equal(t, &amqp.PlainAuth{Username: "herald", Password: password}, d.Client.SASL[0])
		require.True(t, d.Client.TLSClientConfig.RootCAs.Equal(pki.pool))
		require.Empty(t, d.Client.TLSClientConfig.Certificates)
		require.Equal(t, "127.0.0.1", d.Client.TLSClientConfig.ServerName)
	})
}
