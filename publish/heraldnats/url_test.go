package heraldnats_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// secrets is a destination's secrets from a map, named as variables.
type secrets map[string]string

func (s secrets) Secret(what string) (string, error) { return s[what], nil }
func (s secrets) Where(what string) string           { return "ORDERS_" + what }

// writeFile writes content to a file of the test's and returns its path.
func writeFile(t *testing.T, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, content, 0o600))
	return path
}

// selfSigned writes a self-signed certificate and its key, PEM, and
// returns their paths: a CA to trust, or a client's pair.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return writeFile(t, "cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		writeFile(t, "key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

func TestURLsTheNATSPublisherTakes(t *testing.T) {
	t.Parallel()
	nkeyPub, seed := testenv.NATSUser(t)
	nkeyFile := writeFile(t, "user.nk", seed)
	op := testenv.NewNATSOperator(t)
	credsFile := writeFile(t, "user.creds", op.Creds(t, op.Account).File)
	ca, key := selfSigned(t)
	esc := url.QueryEscape
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		display   string
		check     func(t *testing.T, c *heraldnats.URLConfig)
	}{
		{"OneServer", "nats://127.0.0.1:4222", nil, nil, "nats://127.0.0.1:4222", func(t *testing.T, c *heraldnats.URLConfig) {
			require.Equal(t, []string{"nats://127.0.0.1:4222"}, c.Options.Servers)
			require.Empty(t, c.Options.User+c.Options.Password+c.Options.Token+c.Options.Nkey)
			require.False(t, c.Options.Secure)
			require.Equal(t, -1, c.Options.MaxReconnect, "a relay reconnects forever")
			require.Equal(t, heraldnats.Config{}, c.Config)
		}},
		{"ClusterWithThePasswordFromSecrets", "nats://relay@h1:4222, nats://relay@h2:4223", secrets{heraldspec.Password: "pw-0042"},
			nil, "nats://relay@h1:4222,nats://relay@h2:4223", func(t *testing.T, c *heraldnats.URLConfig) {
				require.Equal(t, []string{"nats://h1:4222", "nats://h2:4223"}, c.Options.Servers, "no user information for the client")
				require.Equal(t, "relay", c.Options.User)
				require.Equal(t, "pw-0042", c.Options.Password)
				require.Empty(t, c.Options.Token)
			}},
		{"UserAndPasswordInTheURL", "nats://relay:pw-0042@h:4222", nil, nil, "nats://relay:xxxxx@h:4222", func(t *testing.T, c *heraldnats.URLConfig) {
			require.Equal(t, "relay", c.Options.User)
			require.Equal(t, "pw-0042", c.Options.Password)
		}},
		{"TokenInTheURL", "nats://tok-0042@h:4222", nil, nil, "nats://xxxxx@h:4222", func(t *testing.T, c *heraldnats.URLConfig) {
			require.Equal(t, "tok-0042", c.Options.Token)
			require.Empty(t, c.Options.User)
			require.Equal(t, []string{"nats://h:4222"}, c.Options.Servers)
		}},
		{"TokenFromSecrets", "nats://h:4222", secrets{heraldspec.Token: "tok-0042"}, nil, "nats://h:4222", func(t *testing.T, c *heraldnats.URLConfig) {
			require.Equal(t, "tok-0042", c.Options.Token)
		}},
		{"NkeyFile", "nats://h:4222?nkey_file=" + esc(nkeyFile), nil, nil, "nats://h:4222?nkey_file=" + esc(nkeyFile), func(t *testing.T, c *heraldnats.URLConfig) {
			require.Equal(t, nkeyPub, c.Options.Nkey)
			require.NotNil(t, c.Options.SignatureCB)
			require.Equal(t, []string{"nats://h:4222"}, c.Options.Servers, "Herald's options stay out of the client's URLs")
		}},
		{"CredentialsFileOnOneURLOfAList", "nats://h1:4222?creds_file=" + esc(credsFile) + ",nats://h2:4222", nil, nil, "", func(t *testing.T, c *heraldnats.URLConfig) {
			require.NotNil(t, c.Options.UserJWT)
			require.NotNil(t, c.Options.SignatureCB)
			require.Equal(t, []string{"nats://h1:4222", "nats://h2:4222"}, c.Options.Servers)
		}},
		{"TLSWithACAAndAClientCertificate", "tls://h:4222?ca_file=" + esc(ca) + "&cert_file=" + esc(ca) + "&key_file=" + esc(key), nil, nil, "",
			func(t *testing.T, c *heraldnats.URLConfig) {
				require.True(t, c.Options.Secure)
				require.NotNil(t, c.Options.TLSConfig.RootCAs)
				require.Len(t, c.Options.TLSConfig.Certificates, 1)
				require.Empty(t, c.Options.TLSConfig.ServerName, "the client verifies the host it dials")
				require.False(t, c.Options.TLSConfig.InsecureSkipVerify)
				require.Equal(t, []string{"tls://h:4222"}, c.Options.Servers)
			}},
		{"WebSocketOverTLS", "wss://h:443?ca_file=" + esc(ca), nil, nil, "", func(t *testing.T, c *heraldnats.URLConfig) {
			require.True(t, c.Options.Secure)
			require.Equal(t, []string{"wss://h:443"}, c.Options.Servers)
		}},
		{"ConfigFromTheDestination", "nats://h:4222", nil, &heraldnats.Config{SubjectPrefix: "prod", MaxPending: 7}, "", func(t *testing.T, c *heraldnats.URLConfig) {
			require.Equal(t, "prod", c.Config.SubjectPrefix)
			require.Equal(t, 7, c.Config.MaxPending)
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
			require.Equal(t, "nats", p.Kind)
			if tc.display != "" {
				require.Equal(t, tc.display, p.Display())
			}
			tc.check(t, p.Target().(*heraldnats.URLConfig))
		})
	}
}

func TestURLsTheNATSPublisherRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	garbage := writeFile(t, "garbage.txt", []byte("not a seed, nor a certificate\n"))
	_, seed := testenv.NATSUser(t)
	seedOnly := writeFile(t, "seed-only.creds", seed)
	huge := writeFile(t, "huge.creds", bytes.Repeat([]byte("x"), 65<<10))
	ca, _ := selfSigned(t)
	esc := url.QueryEscape
	for _, tc := range []struct {
		name, url string
		secrets   secrets
		config    any
		says      string
	}{
		{"UnknownOption", "nats://u:hunter2@h:4222?tls_ca=/ca.pem", nil, nil,
			`option "tls_ca" is not known: a nats:// URL takes creds_file, nkey_file, ca_file, cert_file, key_file`},
		{"OptionTwice", "nats://h?ca_file=a&ca_file=b", nil, nil, "option ca_file is given twice"},
		{"OptionWithoutValue", "nats://h?ca_file=", nil, nil, "option ca_file has no value"},
		{"OptionsDifferBetweenURLs", "nats://h1?ca_file=a,nats://h2?ca_file=b", nil, nil, "option ca_file differs between the URLs of one destination"},
		{"UsersDifferBetweenURLs", "nats://a:hunter2@h1,nats://b:hunter2@h2", nil, nil, "the URLs of one destination give different user information"},
		{"CredsFileMissing", "nats://h?creds_file=" + esc(missing), nil, nil, "creds_file=" + missing + ": cannot read it: no such file or directory"},
		{"CredsFileADirectory", "nats://h?creds_file=" + esc(dir), nil, nil, "creds_file=" + dir + " is not a file"},
		{"CredsFileTooLarge", "nats://h?creds_file=" + esc(huge), nil, nil, "creds_file=" + huge + " holds 66560 bytes: not a credentials file"},
		{"CredsFileWithoutCredentials", "nats://h?creds_file=" + esc(garbage), nil, nil, "creds_file=" + garbage + ": no nkey seed in the file"},
		{"CredsFileWithASeedOnly", "nats://h?creds_file=" + esc(seedOnly), nil, nil, "creds_file=" + seedOnly + ": the file's JWT is not a user's"},
		{"NkeyFileWithoutSeed", "nats://h?nkey_file=" + esc(garbage), nil, nil, "nkey_file=" + garbage + ": no nkey seed in the file (a user seed, SU...)"},
		{"TwoWaysToAuthenticate", "nats://relay:hunter2@h?nkey_file=" + esc(seedOnly), nil, nil,
			"give one way to authenticate, not a user and password and nkey_file"},
		{"UserAndTokenSecret", "nats://relay:hunter2@h", secrets{heraldspec.Token: "other-0042"}, nil,
			"give one way to authenticate, not a user and password and ORDERS_TOKEN"},
		{"TokenInTheURLAndInSecrets", "nats://hunter2@h", secrets{heraldspec.Token: "other-0042"}, nil,
			"give one way to authenticate, not a token in the URL and ORDERS_TOKEN"},
		{"PasswordSecretWithoutUser", "nats://h", secrets{heraldspec.Password: "other-0042"}, nil,
			"ORDERS_PASSWORD is set but the URL names no user: nats://USER@HOST:PORT"},
		{"PasswordTwice", "nats://relay:hunter2@h", secrets{heraldspec.Password: "other-0042"}, nil,
			"the URL holds a password and ORDERS_PASSWORD is set: give one"},
		{"TokenCutByAHash", "nats://hun#ter2@h", nil, nil, "the user information holds an '@', '/', '?' or '#' that is not percent-encoded"},
		{"TokenCutByASlash", "nats://hun/ter2@h", nil, nil, "the user information holds an '@', '/', '?' or '#' that is not percent-encoded"},
		{"TLSOptionsOnPlainWebSocket", "ws://h?ca_file=" + esc(ca), nil, nil, "TLS options go with nats://, tls:// or wss://, not ws://"},
		{"CAFileMissing", "tls://h?ca_file=" + esc(missing), nil, nil, "ca_file=" + missing + ": cannot read it: no such file or directory"},
		{"CAFileWithoutCertificate", "tls://h?ca_file=" + esc(garbage), nil, nil, "ca_file=" + garbage + ": no PEM certificate in the file"},
		{"CertificateWithoutKey", "tls://h?cert_file=" + esc(ca), nil, nil, "cert_file and key_file go together"},
		{"AnotherPublishersConfig", "nats://h", nil, struct{}{}, "Config is a struct {}, not a *heraldnats.Config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := heraldspec.Destination{Name: "orders", URL: tc.url, Config: tc.config}
			if tc.secrets != nil {
				d.Secrets = tc.secrets
			}
			_, err := heraldspec.Parse(d)
			require.ErrorContains(t, err, tc.says)
			require.True(t, strings.HasPrefix(err.Error(), "destination orders: "), err.Error())
			require.NotContains(t, err.Error(), "hunter2")
			require.NotContains(t, err.Error(), "ter2")
			require.NotContains(t, err.Error(), "other-0042")
			require.NotContains(t, err.Error(), string(seed))
		})
	}
}

// openNATS opens a destination and returns the error, closing what opened.
func openNATS(t *testing.T, d heraldspec.Destination) error {
	t.Helper()
	if d.ConnectTimeout == 0 {
		d.ConnectTimeout = 2 * time.Second
	}
	pub, closePub, err := heraldspec.Open(t.Context(), d)
	if err == nil {
		require.NotNil(t, pub)
		closePub()
	}
	return err
}

// Against servers that check each way to authenticate, the right
// credentials open the destination and wrong ones are refused: not
// unreachable (waiting would not help), with no secret in the message.
func TestANATSDestinationAuthenticatesOrIsRefused(t *testing.T) {
	t.Parallel()
	const password, token = "pw-Right-0042", "tok-Right-0042"
	nkeyPub, nkeySeed := testenv.NATSUser(t)
	_, otherSeed := testenv.NATSUser(t)
	op := testenv.NewNATSOperator(t)
	stranger, err := nkeys.CreateAccount()
	require.NoError(t, err)
	for _, tc := range []struct {
		name         string
		server       func(*server.Options)
		right, wrong heraldspec.Destination
		secrets      []string
	}{{
		name:    "UserAndPassword",
		server:  func(o *server.Options) { o.Users = []*server.User{{Username: "relay", Password: password}} },
		right:   heraldspec.Destination{URL: "nats://relay@ADDR", Secrets: secrets{heraldspec.Password: password}},
		wrong:   heraldspec.Destination{URL: "nats://relay:hunter2@ADDR"},
		secrets: []string{password, "hunter2"},
	}, {
		name:    "Token",
		server:  func(o *server.Options) { o.Authorization = token },
		right:   heraldspec.Destination{URL: "nats://" + token + "@ADDR"},
		wrong:   heraldspec.Destination{URL: "nats://ADDR", Secrets: secrets{heraldspec.Token: "hunter2"}},
		secrets: []string{token, "hunter2"},
	}, {
		name:    "NkeySeedFile",
		server:  func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: nkeyPub}} },
		right:   heraldspec.Destination{URL: "nats://ADDR?nkey_file=" + url.QueryEscape(writeFile(t, "user.nk", nkeySeed))},
		wrong:   heraldspec.Destination{URL: "nats://ADDR?nkey_file=" + url.QueryEscape(writeFile(t, "other.nk", otherSeed))},
		secrets: []string{string(nkeySeed), string(otherSeed)},
	}, {
		name: "CredentialsFile",
		server: func(o *server.Options) {
			trust := op.ServerOptions(t)
			o.TrustedOperators, o.AccountResolver, o.SystemAccount = trust.TrustedOperators, trust.AccountResolver, trust.SystemAccount
		},
		right: heraldspec.Destination{URL: "nats://ADDR?creds_file=" + url.QueryEscape(writeFile(t, "user.creds", op.Creds(t, op.Account).File))},
		wrong: heraldspec.Destination{URL: "nats://ADDR?creds_file=" + url.QueryEscape(writeFile(t, "stranger.creds", op.Creds(t, stranger).File))},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := startServer(t, tc.server).srv.Addr().String()
			at := func(d heraldspec.Destination) heraldspec.Destination {
				d.Name, d.URL = "orders", strings.Replace(d.URL, "ADDR", addr, 1)
				return d
			}
			require.NoError(t, openNATS(t, at(tc.right)))

			err := openNATS(t, at(tc.wrong))
			var oe *heraldspec.OpenError
			require.ErrorAs(t, err, &oe)
			require.False(t, oe.Unreachable, "%v", err)
			require.Contains(t, err.Error(), "destination orders at nats://")
			require.Contains(t, err.Error(), " refused the credentials: ")
			for _, s := range tc.secrets {
				require.NotContains(t, err.Error(), s)
			}
		})
	}
}

func TestANATSDestinationThatIsDownIsUnreachable(t *testing.T) {
	t.Parallel()
	err := openNATS(t, heraldspec.Destination{Name: "orders", URL: "nats://relay:hunter2@127.0.0.1:1", ConnectTimeout: time.Second})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable, "%v", err)
	require.Contains(t, err.Error(), "cannot reach destination orders at nats://relay:xxxxx@127.0.0.1:1: ")
	require.NotContains(t, err.Error(), "hunter2")
}

// A tls:// URL to a server without TLS is refused, not waited for.
func TestANATSServerWithoutTLSRefusesATLSURL(t *testing.T) {
	t.Parallel()
	addr := startServer(t).srv.Addr().String()
	err := openNATS(t, heraldspec.Destination{Name: "orders", URL: "tls://" + addr})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable, "%v", err)
	require.Equal(t, "destination orders at tls://"+addr+" does not offer TLS, which its URL asks for", err.Error())
}

// The Config set on a parsed destination before Open is the one the
// publisher gets (the daemon's --nats-* flags come this way), and its
// errors name the field and the destination.
func TestTheConfigSetBeforeOpenIsThePublishers(t *testing.T) {
	t.Parallel()
	ns := startServer(t)
	p, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: "nats://" + ns.srv.Addr().String()})
	require.NoError(t, err)
	p.Config = &heraldnats.Config{CreateStream: &jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}}
	pub, closePub, err := p.Open(t.Context())
	require.NoError(t, err)
	require.NotNil(t, pub)
	closePub()
	js, err := jetstream.New(ns.connect(t))
	require.NoError(t, err)
	_, err = js.Stream(t.Context(), "ORDERS")
	require.NoError(t, err, "Open created the stream of the Config set after Parse")

	p.Config = &heraldnats.Config{SubjectPrefix: "a..b"}
	_, _, err = p.Open(t.Context())
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable)
	require.Contains(t, err.Error(), `destination orders: heraldnats: Config.SubjectPrefix "a..b"`)
}

// syncBuffer is a log destination the client's goroutines write to while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The connection is named by the destination's ClientName, and its loss
// and recovery are logged to the destination's Logger.
func TestANATSDestinationNamesAndLogsItsConnection(t *testing.T) {
	t.Parallel()
	ns := startServer(t)
	var logs syncBuffer
	pub, closePub, err := heraldspec.Open(t.Context(), heraldspec.Destination{
		Name: "orders", URL: "nats://" + ns.srv.Addr().String(), ClientName: "herald relay test-owner",
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	require.NotNil(t, pub)
	conns, err := ns.srv.Connz(nil)
	require.NoError(t, err)
	require.Len(t, conns.Conns, 1)
	require.Equal(t, "herald relay test-owner", conns.Conns[0].Name)

	ns.stop()
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `msg="disconnected from NATS; reconnecting" component=nats`)
	},
		10*time.Second, 10*time.Millisecond, "%s", logs.String())
	ns.start(t)
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `msg="reconnected to NATS" component=nats server=nats://`)
	},
		10*time.Second, 10*time.Millisecond, "%s", logs.String())
	closePub()
}

// connect is a client of the test's own.
func (s *restartableServer) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.srv.ClientURL(), nats.Timeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// The seeds the package reads from files reach Destination.OnSecret, so
// that a program that redacts its output can hide them.
func TestTheSeedsOfFilesReachOnSecret(t *testing.T) {
	t.Parallel()
	_, seed := testenv.NATSUser(t)
	nkeyFile := writeFile(t, "user.nk", seed)
	op := testenv.NewNATSOperator(t)
	creds := op.Creds(t, op.Account).File
	credsFile := writeFile(t, "user.creds", creds)
	credsSeed, err := nkeys.ParseDecoratedNKey(creds)
	require.NoError(t, err)
	wantCredsSeed, err := credsSeed.Seed()
	require.NoError(t, err)
	for _, tc := range []struct{ name, url, seed string }{
		{"NkeyFile", "nats://h:4222?nkey_file=" + url.QueryEscape(nkeyFile), string(seed)},
		{"CredsFile", "nats://h:4222?creds_file=" + url.QueryEscape(credsFile), string(wantCredsSeed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var noted []string
			_, err := heraldspec.Parse(heraldspec.Destination{Name: "events", URL: tc.url,
				OnSecret: func(s string) { noted = append(noted, s) }})
			require.NoError(t, err)
			require.Equal(t, []string{tc.seed}, noted)
		})
	}
}
