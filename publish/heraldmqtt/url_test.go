package heraldmqtt_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

// secrets is a destination's secrets from a map, named as variables.
type secrets map[string]string

func (s secrets) Secret(what string) (string, error) { return s[what], nil }
func (s secrets) Where(what string) string           { return "ORDERS_" + what }

// testPKI is a throwaway CA and a server certificate it signed for
// 127.0.0.1, in PEM.
type testPKI struct{ ca, cert, key []byte }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return testPKI{
		ca:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// caFile writes the PKI's CA to a file of the test's own and returns its
// path.
func (p testPKI) caFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, p.ca, 0o600))
	return path
}

func TestURLsTheMQTTPublisherTakes(t *testing.T) {
	t.Parallel()
	ca := newTestPKI(t).caFile(t)
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		check     func(t *testing.T, c *heraldmqtt.URLConfig)
	}{
		{"Plain", "mqtt://127.0.0.1", nil, nil, func(t *testing.T, c *heraldmqtt.URLConfig) {
			require.Equal(t, "mqtt://127.0.0.1:1883", c.Client.ServerUrls[0].String(), "MQTT's port")
			require.Nil(t, c.Client.TlsCfg)
			require.Empty(t, c.Client.ClientID, "Open gives one")
			require.Zero(t, c.Client.KeepAlive, "the publisher's default")
			require.Equal(t, heraldmqtt.Config{}, c.Config)
		}},
		{"EveryOption", "mqtt://relay:pa%2Fss@broker.example/?topic-prefix=herald/&topic-mapping=dots-to-slashes" +
			"&allow-empty-levels=true&max-packet-bytes=65536&require-subscribers=true&client-id=relay-1&keepalive=15", nil, nil,
			func(t *testing.T, c *heraldmqtt.URLConfig) {
				require.Equal(t, "mqtt://broker.example:1883", c.Client.ServerUrls[0].String(), "no credentials in the URL autopaho quotes")
				require.Equal(t, "relay", c.Client.ConnectUsername)
				require.Equal(t, []byte("pa/ss"), c.Client.ConnectPassword)
				require.Equal(t, "relay-1", c.Client.ClientID)
				require.EqualValues(t, 15, c.Client.KeepAlive)
				require.Equal(t, heraldmqtt.Config{TopicPrefix: "herald/", TopicMapping: heraldmqtt.TopicDotsToSlashes,
					AllowEmptyLevels: true, MaxPacketBytes: 65536, RequireSubscribers: true}, c.Config)
			}},
		{"TLSWithTheSystemRoots", "mqtts://broker.example", nil, nil, func(t *testing.T, c *heraldmqtt.URLConfig) {
			require.Equal(t, "mqtts://broker.example:8883", c.Client.ServerUrls[0].String(), "MQTT over TLS's port")
			require.Equal(t, "broker.example", c.Client.TlsCfg.ServerName)
			require.Nil(t, c.Client.TlsCfg.RootCAs, "the system's roots")
		}},
		{"TLSWithTheCAOfCa", "mqtts://broker.example:8884?ca=" + url.QueryEscape(ca), nil, nil, func(t *testing.T, c *heraldmqtt.URLConfig) {
			require.Equal(t, "mqtts://broker.example:8884", c.Client.ServerUrls[0].String())
			require.NotNil(t, c.Client.TlsCfg.RootCAs, "the roots of ca=, not the system's")
		}},
		{"PasswordFromTheSecrets", "mqtt://relay@h", secrets{heraldspec.Password: "pw-0042"}, nil, func(t *testing.T, c *heraldmqtt.URLConfig) {
			require.Equal(t, "relay", c.Client.ConnectUsername)
			require.Equal(t, []byte("pw-0042"), c.Client.ConnectPassword)
		}},
		{"TheURLOverridesTheDestinationsConfig", "mqtt://h?topic-prefix=url/&topic-mapping=verbatim", nil,
			&heraldmqtt.Config{TopicPrefix: "base/", TopicMapping: heraldmqtt.TopicDotsToSlashes, RequireSubscribers: true},
			func(t *testing.T, c *heraldmqtt.URLConfig) {
				require.Equal(t, heraldmqtt.Config{TopicPrefix: "url/", TopicMapping: heraldmqtt.TopicVerbatim, RequireSubscribers: true}, c.Config)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "orders", URL: tc.url, Config: tc.config}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			p, err := heraldspec.Parse(d)
			require.NoError(t, err)
			require.Equal(t, "mqtt", p.Kind)
			tc.check(t, p.Target().(*heraldmqtt.URLConfig))
		})
	}
}

func TestURLsTheMQTTPublisherRefuses(t *testing.T) {
	t.Parallel()
	junk := filepath.Join(t.TempDir(), "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o600))
	const base = "mqtt://u:hunter2@127.0.0.1:1883"
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		says      string
	}{
		{"UnknownOption", base + "?topic-prefx=a/", nil, nil,
			`option "topic-prefx" is not known: an mqtt(s):// URL takes topic-prefix, topic-mapping, allow-empty-levels, max-packet-bytes, ` +
				`require-subscribers, client-id, keepalive, ca (ca for mqtts:// only)`},
		{"APath", base + "/orders", nil, nil, "an mqtt:// URL has no path: each event's topic names its MQTT topic (add a prefix with topic-prefix=)"},
		{"UnknownMapping", base + "?topic-mapping=slashes", nil, nil, `topic-mapping="slashes": use verbatim or dots-to-slashes`},
		{"WildcardPrefix", base + "?topic-prefix=a/%2B/", nil, nil, "topic-prefix holds a wildcard"},
		{"PrefixOfTheBrokersOwnTopics", base + "?topic-prefix=$SYS/", nil, nil, "topic-prefix starts with '$'"},
		{"NotABool", base + "?require-subscribers=maybe", nil, nil, `require-subscribers="maybe": use true or false`},
		{"NoPacket", base + "?max-packet-bytes=0", nil, nil, `max-packet-bytes="0": use a number of bytes from 1 to 268435460`},
		{"KeepAliveTooLong", base + "?keepalive=70000", nil, nil, `keepalive="70000": use a number of seconds from 1 to 65535`},
		{"ClientIDWithASlash", base + "?client-id=a/b", nil, nil, `client-id="a/b": use 1 to 256 printable characters without spaces, '/', '+' or '#'`},
		{"EmptyClientID", base + "?client-id=", nil, nil, `client-id="": use 1 to 256`},
		{"OptionTwice", base + "?topic-prefix=a/&topic-prefix=b/", nil, nil, "option topic-prefix is given twice"},
		{"CAWithoutTLS", base + "?ca=/etc/ssl/certs/ca-certificates.crt", nil, nil, "option ca is for mqtts:// (TLS) only"},
		{"UnreadableCA", "mqtts://u:hunter2@127.0.0.1?ca=/nonexistent/ca.pem", nil, nil, "ca=/nonexistent/ca.pem: no such file or directory"},
		{"CAWithoutACertificate", "mqtts://127.0.0.1?ca=" + url.QueryEscape(junk), nil, nil, "ca=" + junk + ": no PEM certificate in the file"},
		{"TwoPasswords", base, secrets{heraldspec.Password: "other-0042"}, nil, "the URL holds a password and ORDERS_PASSWORD is set; give one"},
		{"TwoURLs", "mqtt://a,mqtt://b", nil, nil, "a mqtt destination takes one URL"},
		{"AConfigOfAnotherPublisher", base, nil, &struct{ TopicPrefix string }{}, "Config is a *struct { TopicPrefix string }, not a *heraldmqtt.Config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "orders", URL: tc.url, Config: tc.config}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			_, err := heraldspec.Parse(d)
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, err.Error(), "other-0042")
		})
	}
}

func TestAnMQTTDestinationThatIsDownIsUnreachable(t *testing.T) {
	t.Parallel()
	_, _, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "orders", URL: "mqtt://u:hunter2@127.0.0.1:1", ConnectTimeout: time.Second})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable, "%v", err)
	require.Contains(t, err.Error(), "cannot reach destination orders at mqtt://u:xxxxx@127.0.0.1:1: ")
	require.NotContains(t, err.Error(), "hunter2")
}

// A broker whose CONNACK refuses the password will refuse it again: not a
// broker to wait for. With the right one, from the destination's secrets,
// the connection is named after the destination's ClientName in the
// broker's log.
func TestAnMQTTDestinationsCredentials(t *testing.T) {
	t.Parallel()
	passwd, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		unavailable(t, "mosquitto_passwd is not installed (apt-get install mosquitto)")
	}
	dir := t.TempDir()
	out, err := exec.Command(passwd, "-c", "-b", filepath.Join(dir, "passwords"), "relay", "right-0042").CombinedOutput()
	require.NoError(t, err, "%s", out)
	log := filepath.Join(dir, "mosquitto.log")
	broker := startMosquitto(t, "allow_anonymous false\npassword_file "+filepath.Join(dir, "passwords")+
		"\nlog_dest file "+log+"\nconnection_messages true", nil)
	open := func(password string) (func(), error) {
		_, closePub, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "orders", URL: "mqtt://relay@" + broker.addr,
			Secrets: secrets{heraldspec.Password: password}, ClientName: "herald relay test/1", ConnectTimeout: 5 * time.Second})
		return closePub, err
	}

	_, err = open("hunter2-wrong")
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable, "%v", err)
	require.Contains(t, err.Error(), "destination orders at mqtt://relay@"+broker.addr+" refused the credentials: ")
	require.NotContains(t, err.Error(), "hunter2")

	closePub, err := open("right-0042")
	require.NoError(t, err)
	defer closePub()
	named := regexp.MustCompile(`New client connected from \S+ as herald-relay-test-1-[0-9a-f]{16} `)
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(log)
		return err == nil && named.Match(b)
	}, 10*time.Second, 20*time.Millisecond, "the broker logs the connection under the destination's ClientName")
}

// A broker whose certificate the destination does not trust refuses it
// until ca= names the CA that signed it: not a broker to wait for.
func TestAnMQTTSDestinationTrustsTheCAOfCa(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	tlsPort := strconv.Itoa(testenv.FreePort(t))
	startMosquitto(t, "listener "+tlsPort+" 127.0.0.1\ncafile {dir}/ca.pem\ncertfile {dir}/server.pem\nkeyfile {dir}/server.key",
		map[string]string{"ca.pem": string(pki.ca), "server.pem": string(pki.cert), "server.key": string(pki.key)})
	dest := func(query string) heraldspec.Destination {
		return heraldspec.Destination{Name: "orders", URL: "mqtts://127.0.0.1:" + tlsPort + query, ConnectTimeout: 5 * time.Second}
	}

	_, _, err := heraldspec.Open(t.Context(), dest(""))
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable, "%v", err)
	require.Contains(t, err.Error(), "destination orders at mqtts://127.0.0.1:"+tlsPort+": the TLS handshake failed: ")
	require.Contains(t, err.Error(), "x509: certificate signed by unknown authority (check the URL's ca=)")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, closePub, err := heraldspec.Open(ctx, dest("?ca="+url.QueryEscape(pki.caFile(t))))
	require.NoError(t, err)
	closePub()
}
