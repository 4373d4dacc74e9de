package heraldkafka_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// secrets is a destination's secrets from a map, named as variables.
type secrets map[string]string

func (s secrets) Secret(what string) (string, error) { return s[what], nil }
func (s secrets) Where(what string) string           { return "ORDERS_" + what }

// testPKI is a throwaway CA, a server certificate it signed for 127.0.0.1,
// and a client certificate, as PEM files.
type testPKI struct {
	CAFile, CertFile, KeyFile string
	pool                      *x509.CertPool
	server                    tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
		return path
	}
	p.CAFile = write("ca.pem", "CERTIFICATE", caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage) ([]byte, []byte, tls.Certificate) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return der, keyDER, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	_, _, p.server = issue(2, x509.ExtKeyUsageServerAuth)
	certDER, keyDER, _ := issue(3, x509.ExtKeyUsageClientAuth)
	p.CertFile, p.KeyFile = write("client.pem", "CERTIFICATE", certDER), write("client.key", "EC PRIVATE KEY", keyDER)
	return p
}

// clientSettings are the TLS configuration and SASL mechanism the client
// built from c's options has.
func clientSettings(t *testing.T, c *heraldkafka.URLConfig) (*tls.Config, []sasl.Mechanism) {
	t.Helper()
	cl, err := heraldkafka.NewClient(c.Brokers, c.Options...)
	require.NoError(t, err)
	defer cl.Close()
	cfg, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config)
	mechanisms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
	return cfg, mechanisms
}

// saslFirstMessage is what mechanism m sends first: for PLAIN, the user
// and the password.
func saslFirstMessage(t *testing.T, m sasl.Mechanism) string {
	t.Helper()
	_, msg, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
	require.NoError(t, err)
	return string(msg)
}

func TestURLsTheKafkaPublisherTakes(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	files := url.Values{"ca_file": {pki.CAFile}, "cert_file": {pki.CertFile}, "key_file": {pki.KeyFile}}.Encode()
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		check     func(t *testing.T, c *heraldkafka.URLConfig)
	}{
		{name: "OneBrokerInPlaintext", url: "kafka://127.0.0.1:9092", check: func(t *testing.T, c *heraldkafka.URLConfig) {
			require.Equal(t, []string{"127.0.0.1:9092"}, c.Brokers)
			require.Empty(t, c.Options)
			require.Empty(t, c.Mechanism)
			require.False(t, c.TLS)
		}},
		{name: "SeedBrokersWithTheOptionsOnOneURL", url: "kafka://relay@k1:9092?sasl=scram-sha-512,kafka://k2:9093",
			secrets: secrets{heraldspec.Password: "pw-0042"}, check: func(t *testing.T, c *heraldkafka.URLConfig) {
				require.Equal(t, []string{"k1:9092", "k2:9093"}, c.Brokers)
				require.Equal(t, "scram-sha-512", c.Mechanism)
				require.Equal(t, "relay", c.User)
				tlsCfg, mechanisms := clientSettings(t, c)
				require.Nil(t, tlsCfg)
				require.Len(t, mechanisms, 1)
				require.Equal(t, "SCRAM-SHA-512", mechanisms[0].Name())
			}},
		{name: "PlainWithThePasswordOfTheSecret", url: "kafka://relay@k1:9092?sasl=PLAIN&tls=true",
			secrets: secrets{heraldspec.Password: "pw-0042"}, check: func(t *testing.T, c *heraldkafka.URLConfig) {
				require.Equal(t, "plain", c.Mechanism)
				require.True(t, c.TLS)
				tlsCfg, mechanisms := clientSettings(t, c)
				require.NotNil(t, tlsCfg)
				require.Nil(t, tlsCfg.RootCAs, "the system's roots")
				require.Equal(t, "\x00relay\x00pw-0042", saslFirstMessage(t, mechanisms[0]))
			}},
		{name: "PlainWithThePasswordOfTheURL", url: "kafka://relay:url-pw@k1:9092?sasl=plain", check: func(t *testing.T, c *heraldkafka.URLConfig) {
			_, mechanisms := clientSettings(t, c)
			require.Equal(t, "\x00relay\x00url-pw", saslFirstMessage(t, mechanisms[0]))
			require.False(t, c.TLS)
		}},
		{name: "TLSFilesImplyTLS", url: "kafka://k1:9093?" + files, check: func(t *testing.T, c *heraldkafka.URLConfig) {
			require.True(t, c.TLS)
			tlsCfg, mechanisms := clientSettings(t, c)
			require.True(t, tlsCfg.RootCAs.Equal(pki.pool), "the CA of ca_file only")
			require.Len(t, tlsCfg.Certificates, 1)
			require.Empty(t, tlsCfg.ServerName, "each broker is verified under the host the client dials")
			require.False(t, tlsCfg.InsecureSkipVerify)
			require.Empty(t, mechanisms)
		}},
		{name: "TLSOff", url: "kafka://k1:9092?tls=false", check: func(t *testing.T, c *heraldkafka.URLConfig) {
			require.False(t, c.TLS)
			require.Empty(t, c.Options)
		}},
		{name: "Transactional", url: "kafka://k1:9092?transactional=true&transactional_id=relay-a", check: func(t *testing.T, c *heraldkafka.URLConfig) {
			require.Equal(t, &heraldkafka.Transactional{ID: "relay-a"}, c.Config.Transactional)
		}},
		{name: "TransactionalWithTheDefaultID", url: "kafka://k1:9092?transactional=1", check: func(t *testing.T, c *heraldkafka.URLConfig) {
			require.Equal(t, &heraldkafka.Transactional{}, c.Config.Transactional, "the host name, when the publisher is made")
		}},
		{name: "NotTransactional", url: "kafka://k1:9092?transactional=false", check: func(t *testing.T, c *heraldkafka.URLConfig) {
			require.Nil(t, c.Config.Transactional)
		}},
		{name: "TransactionalFromGo", url: "kafka://k1:9092?transactional_id=relay-b",
			config: &heraldkafka.Config{Transactional: &heraldkafka.Transactional{Clients: 2}},
			check: func(t *testing.T, c *heraldkafka.URLConfig) {
				require.Equal(t, &heraldkafka.Transactional{ID: "relay-b", Clients: 2}, c.Config.Transactional)
			}},
		{name: "TheConfigToStartFrom", url: "kafka://k1:9092", config: &heraldkafka.Config{TopicPrefix: "prod."},
			check: func(t *testing.T, c *heraldkafka.URLConfig) { require.Equal(t, "prod.", c.Config.TopicPrefix) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "orders", URL: tc.url, Config: tc.config}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			p, err := heraldspec.Parse(d)
			require.NoError(t, err)
			require.Equal(t, "kafka", p.Kind)
			tc.check(t, p.Target().(*heraldkafka.URLConfig))
		})
	}
}

func TestURLsTheKafkaPublisherRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate\n"), 0o600))
	pki := newTestPKI(t)
	password := secrets{heraldspec.Password: "other-0042"}
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		says      string
	}{
		{"UnknownOption", "kafka://h:9092?sasl_mechanism=plain", nil,
			`option "sasl_mechanism" is not known: a kafka:// URL takes sasl, tls, transactional, transactional_id, ca_file, cert_file, key_file`},
		{"TransactionalNotABoolean", "kafka://h:9092?transactional=maybe", nil, `transactional="maybe": use true or false`},
		{"TransactionalIDWithoutTransactional", "kafka://h:9092?transactional_id=a", nil, "transactional_id= goes with transactional=true"},
		{"TransactionalIDTooLong", "kafka://h:9092?transactional=true&transactional_id=" + strings.Repeat("a", 201), nil, "Config.Transactional.ID is longer than 200 bytes"},
		{"OptionWithoutValue", "kafka://h:9092?ca_file=", nil, "option ca_file has no value"},
		{"OptionTwice", "kafka://h:9092?tls=true&tls=true", nil, "option tls is given twice"},
		{"OptionsDifferBetweenURLs", "kafka://h1:9092?tls=true,kafka://h2:9092?tls=false", nil,
			"option tls differs between the URLs of one destination"},
		{"UsersDifferBetweenURLs", "kafka://a:hunter2@h1:9092?sasl=plain,kafka://b@h2:9092", nil,
			"the URLs of one destination give different user information: give it once"},
		{"APath", "kafka://h:9092/orders", nil, "a kafka:// URL has no path: each event's topic names its Kafka topic"},
		{"UserWithoutSASL", "kafka://herald:hunter2@h:9092", nil,
			"the URL names a user but no SASL mechanism: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512"},
		{"PasswordSecretWithoutSASL", "kafka://h:9092", password,
			"ORDERS_PASSWORD is set but the URL has no sasl=: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512, or unset it"},
		{"UnknownMechanism", "kafka://herald:hunter2@h:9092?sasl=gssapi", nil, `sasl="gssapi" is not supported: use plain, scram-sha-256, scram-sha-512`},
		{"SASLWithoutUser", "kafka://h:9092?sasl=plain", secrets{}, "sasl=plain needs a user name: kafka://USER@HOST:PORT, its password in ORDERS_PASSWORD"},
		{"SASLWithoutPassword", "kafka://herald@h:9092?sasl=scram-sha-256", nil, "sasl=scram-sha-256 needs a password in the destination's PASSWORD secret"},
		{"TwoPasswords", "kafka://herald:hunter2@h:9092?sasl=plain", password, "the URL holds a password and ORDERS_PASSWORD is set: give one"},
		{"TLSNotABoolean", "kafka://h:9092?tls=yes-please", nil, `tls="yes-please": use true or false`},
		{"TLSOffWithACAFile", "kafka://h:9092?tls=false&ca_file=" + pki.CAFile, nil, "tls=false goes with no ca_file, cert_file or key_file"},
		{"CAFileMissing", "kafka://h:9092?ca_file=" + missing, nil, "ca_file=" + missing + ": cannot read it: no such file or directory"},
		{"CAFileWithoutCertificate", "kafka://h:9092?ca_file=" + garbage, nil, "ca_file=" + garbage + ": no PEM certificate in the file"},
		{"CertificateWithoutKey", "kafka://h:9092?cert_file=" + pki.CertFile, nil, "cert_file and key_file go together"},
		{"KeyFileMissing", "kafka://h:9092?cert_file=" + pki.CertFile + "&key_file=" + missing, nil, "key_file=" + missing + ": cannot read it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "orders", URL: tc.url}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			_, err := heraldspec.Parse(d)
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, err.Error(), "other-0042")
		})
	}
	t.Run("AnotherPublishersConfig", func(t *testing.T) {
		t.Parallel()
		_, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: "kafka://h:9092", Config: &heraldspec.Destination{}})
		require.ErrorContains(t, err, "Config is a *heraldspec.Destination, not a *heraldkafka.Config")
	})
}

// openKafka opens a kafka:// destination with a short connect timeout and
// a logger the test reads; it closes what it opened at the end.
func openKafka(t *testing.T, raw string, s heraldspec.Secrets) (herald.Publisher, *testenv.LogBuffer, error) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	pub, closePub, err := heraldspec.Open(context.Background(), heraldspec.Destination{Name: "orders", URL: raw, Secrets: s,
		ConnectTimeout: 2 * time.Second, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err == nil {
		t.Cleanup(closePub)
	}
	return pub, logs, err
}

// A kafka:// destination opens against kfake configured for SASL and TLS:
// the right credentials publish; wrong ones, and a server certificate it
// does not trust, are refused (not unreachable) without the password; a
// broker that does not answer is unreachable.
func TestAKafkaDestinationOpens(t *testing.T) {
	t.Parallel()
	const user, password = "herald-relay", "kafka-pw-0042"
	pki := newTestPKI(t)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12}
	for _, mechanism := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mechanism, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.EnableSASL(),
				kfake.Superuser(mechanism, user, password), kfake.TLS(serverTLS))
			require.NoError(t, err)
			t.Cleanup(c.Close)
			raw := "kafka://" + user + "@" + c.ListenAddrs()[0] + "?sasl=" + strings.ToLower(mechanism) + "&ca_file=" + url.QueryEscape(pki.CAFile)

			t.Run("TheRightCredentialsPublish", func(t *testing.T) {
				pub, _, err := openKafka(t, raw, secrets{heraldspec.Password: password})
				require.NoError(t, err)
				require.NoError(t, pub.Publish(context.Background(), []herald.Envelope{envelope("orders")}))
			})
			t.Run("AWrongPasswordIsRefused", func(t *testing.T) {
				_, _, err := openKafka(t, raw, secrets{heraldspec.Password: "hunter2"})
				var oe *heraldspec.OpenError
				require.ErrorAs(t, err, &oe)
				require.False(t, oe.Unreachable, "%v", err)
				require.Contains(t, err.Error(), "destination orders at kafka://"+user+"@"+c.ListenAddrs()[0])
				// kfake hangs up on wrong credentials, as some brokers do.
				require.Contains(t, err.Error(), " refused the credentials: the broker closed the connection in answer to SASL "+
					mechanism+` as user "`+user+`"`)
				require.NotContains(t, err.Error(), "hunter2")
			})
		})
	}

	t.Run("PlainWithoutTLSIsLoggedAtWarn", func(t *testing.T) {
		t.Parallel()
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("PLAIN", user, password))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		_, logs, err := openKafka(t, "kafka://"+user+"@"+c.ListenAddrs()[0]+"?sasl=plain", secrets{heraldspec.Password: password})
		require.NoError(t, err)
		var warned bool
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			if rec["msg"] == "SASL PLAIN without TLS sends the Kafka password in the clear: add tls=true" {
				warned = true
				require.Equal(t, "WARN", rec["level"])
				require.Equal(t, "orders", rec["destination"])
			}
		}
		require.True(t, warned, "no warning in %s", logs)
		require.NotContains(t, logs.String(), password)
	})
	t.Run("AnUntrustedServerCertificateIsRefused", func(t *testing.T) {
		t.Parallel()
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(serverTLS))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		_, _, err = openKafka(t, "kafka://"+c.ListenAddrs()[0]+"?tls=true", nil)
		var oe *heraldspec.OpenError
		require.ErrorAs(t, err, &oe)
		require.False(t, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), "the server's certificate is not trusted (give its CA as ca_file=)")
	})
	t.Run("ABrokerThatIsDownIsUnreachable", func(t *testing.T) {
		t.Parallel()
		_, _, err := openKafka(t, "kafka://"+user+":hunter2@127.0.0.1:1?sasl=scram-sha-256", nil)
		var oe *heraldspec.OpenError
		require.ErrorAs(t, err, &oe)
		require.True(t, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), "cannot reach destination orders at kafka://"+user+":xxxxx@127.0.0.1:1?sasl=scram-sha-256: ")
		require.NotContains(t, err.Error(), "hunter2")
	})
}
