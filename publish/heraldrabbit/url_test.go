package heraldrabbit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// secrets is a destination's secrets from a map, named as variables.
type secrets map[string]string

func (s secrets) Secret(what string) (string, error) { return s[what], nil }
func (s secrets) Where(what string) string           { return "ORDERS_" + what }

// tlsFiles writes a throwaway CA and a client certificate and key it
// signed, in PEM, and returns their paths.
func tlsFiles(t *testing.T) (ca, cert, key string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
		return path
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "herald"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &clientKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	require.NoError(t, err)
	return write("ca.pem", "CERTIFICATE", caDER), write("client.pem", "CERTIFICATE", leafDER), write("client.key", "EC PRIVATE KEY", keyDER)
}

func TestURLsTheRabbitPublisherTakes(t *testing.T) {
	t.Parallel()
	ca, cert, key := tlsFiles(t)
	files := "ca_file=" + url.QueryEscape(ca) + "&cert_file=" + url.QueryEscape(cert) + "&key_file=" + url.QueryEscape(key)
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		check     func(t *testing.T, c *heraldrabbit.URLConfig)
	}{
		{"Plain", "amqp://127.0.0.1:5672/", nil, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.Equal(t, "amqp://127.0.0.1:5672/", c.URI)
			require.Equal(t, []string{c.URI}, c.URIs)
			require.Empty(t, c.Client.SASL, "the client takes the URL's user and password")
			require.Nil(t, c.Client.TLSClientConfig)
			require.Empty(t, c.Config.Exchange, "the default exchange")
		}},
		{"ExchangeAndClientOptions", "amqp://u:pw@h/orders?exchange=events&heartbeat=5&channel_max=8", nil, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.Equal(t, "amqp://u:pw@h/orders?channel_max=8&heartbeat=5", c.URI, "Herald's options are taken out")
			require.Equal(t, "events", c.Config.Exchange)
		}},
		{"PasswordFromTheSecrets", "amqp://relay@h/", secrets{heraldspec.Password: "pw-0042"}, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.Equal(t, []amqp.Authentication{&amqp.PlainAuth{Username: "relay", Password: "pw-0042"}}, c.Client.SASL)
			require.NotContains(t, c.URI, "pw-0042")
		}},
		{"PasswordFromTheSecretsForTheDefaultUser", "amqp://h/", secrets{heraldspec.Password: "pw-0042"}, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.Equal(t, []amqp.Authentication{&amqp.PlainAuth{Username: "guest", Password: "pw-0042"}}, c.Client.SASL)
		}},
		{"TLSWithTheSystemRoots", "amqps://h/", nil, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.NotNil(t, c.Client.TLSClientConfig)
			require.Equal(t, "h", c.Client.TLSClientConfig.ServerName)
			require.Nil(t, c.Client.TLSClientConfig.RootCAs, "the system's roots")
			require.Empty(t, c.Client.TLSClientConfig.Certificates)
			require.False(t, c.Client.TLSClientConfig.InsecureSkipVerify)
		}},
		{"TLSWithACAAndAClientCertificate", "amqps://h:5671/?" + files, nil, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.Equal(t, "amqps://h:5671/", c.URI)
			require.NotNil(t, c.Client.TLSClientConfig.RootCAs)
			require.Len(t, c.Client.TLSClientConfig.Certificates, 1)
		}},
		{"ClusterNodes", "amqp://u:pw@h1:5672/orders?exchange=events&heartbeat=5,amqp://h2:5673,amqp://h3", nil, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.Equal(t, []string{
				"amqp://u:pw@h1:5672/orders?heartbeat=5",
				"amqp://u:pw@h2:5673/orders?heartbeat=5",
				"amqp://u:pw@h3/orders?heartbeat=5",
			}, c.URIs, "the user, vhost and options of the list hold for every node")
			require.Equal(t, c.URIs[0], c.URI)
			require.Equal(t, "events", c.Config.Exchange)
		}},
		{"ClusterNodesOverTLS", "amqps://h1/," + "amqps://h2/?" + files, nil, nil, func(t *testing.T, c *heraldrabbit.URLConfig) {
			require.Equal(t, []string{"amqps://h1/", "amqps://h2/"}, c.URIs)
			require.Empty(t, c.Client.TLSClientConfig.ServerName, "each node verified for its own host")
			require.NotNil(t, c.Client.TLSClientConfig.RootCAs)
		}},
		{"TheURLOverridesTheDestinationsConfig", "amqp://h/?exchange=events", nil,
			&heraldrabbit.Config{Exchange: "base", ContentType: "application/json"}, func(t *testing.T, c *heraldrabbit.URLConfig) {
				require.Equal(t, "events", c.Config.Exchange)
				require.Equal(t, "application/json", c.Config.ContentType)
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
			require.Equal(t, "amqp", p.Kind)
			tc.check(t, p.Target().(*heraldrabbit.URLConfig))
		})
	}
}

func TestURLsTheRabbitPublisherRefuses(t *testing.T) {
	t.Parallel()
	_, cert, _ := tlsFiles(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	const base = "amqps://relay:hunter2@h/?"
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		says      string
	}{
		{"UnknownOption", base + "prefetch=10", nil, nil,
			`option "prefetch" is not known: an amqp(s):// URL takes exchange, ca_file, cert_file, key_file (the last three for amqps:// only), and the client's heartbeat, connection_timeout, channel_max`},
		{"RabbitMQsSpellingOfATLSOption", base + "cacertfile=/ca.pem", nil, nil, "option cacertfile: write it ca_file= (Herald's name for it)"},
		{"OptionTwice", base + "exchange=a&exchange=b", nil, nil, "option exchange is given twice"},
		{"ExchangeTooLong", base + "exchange=" + strings.Repeat("x", 256), nil, nil, "exchange= is 256 bytes; AMQP allows 255"},
		{"TLSFilesWithoutTLS", "amqp://relay:hunter2@h/?ca_file=/ca.pem", nil, nil, "ca_file, cert_file and key_file are for amqps:// (TLS) only"},
		{"UnreadableKeyFile", base + "cert_file=" + url.QueryEscape(cert) + "&key_file=" + url.QueryEscape(missing), nil, nil,
			"key_file=" + missing + ": cannot read it: no such file or directory"},
		{"CertWithoutKey", base + "cert_file=" + url.QueryEscape(cert), nil, nil, "cert_file and key_file go together"},
		{"BadHeartbeat", base + "heartbeat=often", nil, nil, "heartbeat is not an uint16"},
		{"TwoPasswords", base, secrets{heraldspec.Password: "other-0042"}, nil, "the URL holds a password and ORDERS_PASSWORD is set; give one"},
		{"TLSAndPlainNodes", "amqps://a/,amqp://b/", nil, nil, "the URLs of one destination are all amqp:// or all amqps://"},
		{"NodesWithOtherOptions", "amqp://a/?exchange=x,amqp://b/?exchange=y", nil, nil, "option exchange differs between the URLs of one destination"},
		{"NodesWithOtherVhosts", "amqp://a/orders,amqp://b/billing", nil, nil, "the URLs of one destination name different vhosts: give it once"},
		{"NodesWithOtherUsers", "amqp://relay:hunter2@a/,amqp://other@b/", nil, nil, "the URLs of one destination give different user information"},
		{"AConfigOfAnotherPublisher", base, nil, &struct{ Exchange string }{}, "Config is a *struct { Exchange string }, not a *heraldrabbit.Config"},
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

func TestARabbitDestinationThatIsDownIsUnreachable(t *testing.T) {
	t.Parallel()
	_, _, err := heraldspec.Open(context.Background(), heraldspec.Destination{Name: "orders", URL: "amqp://u:hunter2@127.0.0.1:1/", ConnectTimeout: time.Second})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable, "%v", err)
	require.Contains(t, err.Error(), "cannot reach destination orders at amqp://u:xxxxx@127.0.0.1:1/: ")
	require.NotContains(t, err.Error(), "hunter2")
}

// A broker that refuses the password will refuse it again: not a broker
// to wait for.
func TestARabbitDestinationRefusingTheCredentialsIsNotUnreachable(t *testing.T) {
	testenv.Long(t) // RabbitMQ answers a wrong password after a pause
	t.Parallel()
	adminConn(t) // skips without RabbitMQ
	_, _, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "orders", URL: "amqp://guest@127.0.0.1:5672/",
		Secrets: secrets{heraldspec.Password: "hunter2-wrong"}})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable, "%v", err)
	require.Contains(t, err.Error(), "destination orders at amqp://guest@127.0.0.1:5672/ refused the credentials: ")
	require.NotContains(t, err.Error(), "hunter2")
}

// A destination opened from its URL publishes to the URL's exchange, on a
// connection named by the destination's ClientName.
func TestARabbitDestinationOpensNamedByItsClientName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		unavailable(t, "rabbitmqctl is not installed: cannot list the broker's connections")
	}
	q := b.queue(t, "orders", nil)
	name := b.prefix + "relay"
	pub, closePub, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "orders",
		URL: brokerURL + "?exchange=" + url.QueryEscape(b.exchange), ClientName: name})
	require.NoError(t, err)
	defer closePub()
	env := envelope("orders", "k")
	require.NoError(t, pub.Publish(t.Context(), []herald.Envelope{env}))
	require.Equal(t, envIDs(env), parsedIDs(t, b.read(t, q, 1)))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ctl, "-q", "list_connections", "--no-table-headers", "client_properties").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf(`{"connection_name",%q}`, name))
}
