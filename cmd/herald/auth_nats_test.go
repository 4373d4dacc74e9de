package main

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// startAuthNATS embeds a JetStream server configured by opts (users,
// nkeys, a token, an operator, TLS) on a random port of 127.0.0.1 until
// the test ends, and returns its host:port.
func startAuthNATS(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, true, t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(10*time.Second), "the NATS server did not start")
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Addr().(*net.TCPAddr).Port))
}

// writeFile writes content to a file of the test's and returns its path.
func writeFile(t *testing.T, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, content, 0o600))
	return path
}

// natsCase is one way to authenticate to a NATS server: how the relay is
// given it, right and wrong, and how the test reads the stream back.
type natsCase struct {
	name         string
	server       *server.Options
	right, wrong func(addr string) (env map[string]string, args []string)
	client       []nats.Option // the test's own connection to the server
	secrets      []string      // what must show nowhere
}

// NATS destinations authenticate with a user and password (in the URL or
// the destination's PASSWORD variable), a token, an nkey seed file, a
// credentials file (operator, account and user JWTs), and TLS with a CA
// file and a client certificate, against embedded servers configured for
// each: the right credentials relay events end to end; wrong ones stop the
// relay at once in one line; the secret shows nowhere.
func TestRelayAuthenticatesToNATS(t *testing.T) {
	t.Parallel()
	const password, token = "nats-Pw-4417-secret", "nats-Tok3n-9920-secret"
	nkeyPub, nkeySeed := testenv.NATSUser(t)
	_, otherSeed := testenv.NATSUser(t)
	op := testenv.NewNATSOperator(t)
	right := op.Creds(t, op.Account)
	credsRight, credsSeed := right.File, right.Seed
	stranger, err := nkeys.CreateAccount()
	require.NoError(t, err)
	credsWrong := op.Creds(t, stranger).File
	credsFile := writeFile(t, "herald.creds", credsRight)
	pki := newTestPKI(t)
	_, clientCert, clientKey := pki.issue(t, "herald-client", true)
	tlsQuery := "?" + url.Values{"ca_file": {pki.CAFile}, "cert_file": {clientCert}, "key_file": {clientKey}}.Encode()
	users := []*server.User{{Username: "herald", Password: password}}
	serverTLS := pki.serverTLS(t, true)

	dest := func(raw string) []string { return []string{"--destination", "events=" + raw} }
	cases := []natsCase{{
		name:   "UserAndPasswordFromTheDestinationsVariable",
		server: &server.Options{Users: users},
		right: func(addr string) (map[string]string, []string) {
			return map[string]string{"HERALD_DESTINATION_EVENTS_PASSWORD": password}, dest("nats://herald@" + addr)
		},
		wrong: func(addr string) (map[string]string, []string) {
			return map[string]string{"HERALD_DESTINATION_EVENTS_PASSWORD": password + "x"}, dest("nats://herald@" + addr)
		},
		client:  []nats.Option{nats.UserInfo("herald", password)},
		secrets: []string{password},
	}, {
		name:   "UserAndPasswordInThePublisherURL",
		server: &server.Options{Users: users},
		right: func(addr string) (map[string]string, []string) {
			return nil, []string{"--publisher", "nats://herald:" + password + "@" + addr}
		},
		wrong: func(addr string) (map[string]string, []string) {
			return nil, []string{"--publisher", "nats://herald:" + password + "x@" + addr}
		},
		client:  []nats.Option{nats.UserInfo("herald", password)},
		secrets: []string{password},
	}, {
		name:   "TokenFromThePublishersFileVariable",
		server: &server.Options{Authorization: token},
		right: func(addr string) (map[string]string, []string) {
			return map[string]string{"HERALD_NATS_TOKEN_FILE": writeFile(t, "token", []byte(token+"\n"))}, []string{"--publisher", "nats://" + addr}
		},
		wrong: func(addr string) (map[string]string, []string) {
			return map[string]string{"HERALD_NATS_TOKEN": token + "x"}, []string{"--publisher", "nats://" + addr}
		},
		client:  []nats.Option{nats.Token(token)},
		secrets: []string{token},
	}, {
		name:   "NkeySeedFile",
		server: &server.Options{Nkeys: []*server.NkeyUser{{Nkey: nkeyPub}}},
		right: func(addr string) (map[string]string, []string) {
			return nil, dest("nats://" + addr + "?nkey_file=" + url.QueryEscape(writeFile(t, "user.nk", nkeySeed)))
		},
		wrong: func(addr string) (map[string]string, []string) {
			return nil, dest("nats://" + addr + "?nkey_file=" + url.QueryEscape(writeFile(t, "other.nk", otherSeed)))
		},
		client:  []nats.Option{must(nats.NkeyOptionFromSeed(writeFile(t, "client.nk", nkeySeed)))},
		secrets: []string{string(nkeySeed), string(otherSeed)},
	}, {
		name:   "CredentialsFileOfAnOperatorsAccount",
		server: op.ServerOptions(t),
		right: func(addr string) (map[string]string, []string) {
			return nil, dest("nats://" + addr + "?creds_file=" + url.QueryEscape(credsFile))
		},
		wrong: func(addr string) (map[string]string, []string) {
			return nil, dest("nats://" + addr + "?creds_file=" + url.QueryEscape(writeFile(t, "stranger.creds", credsWrong)))
		},
		client:  []nats.Option{nats.UserCredentials(credsFile)},
		secrets: []string{credsSeed},
	}, {
		name:   "MutualTLSWithAUserAndPassword",
		server: &server.Options{Users: users, TLS: true, TLSVerify: true, TLSConfig: serverTLS, TLSTimeout: 5},
		right: func(addr string) (map[string]string, []string) {
			return map[string]string{"HERALD_DESTINATION_EVENTS_PASSWORD": password}, dest("tls://herald@" + addr + tlsQuery)
		},
		wrong: func(addr string) (map[string]string, []string) {
			// The CA alone: the server asks for the client certificate.
			return map[string]string{"HERALD_DESTINATION_EVENTS_PASSWORD": password},
				dest("tls://herald@" + addr + "?ca_file=" + url.QueryEscape(pki.CAFile))
		},
		client:  []nats.Option{nats.UserInfo("herald", password), nats.RootCAs(pki.CAFile), nats.ClientCert(clientCert, clientKey)},
		secrets: []string{password},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := startAuthNATS(t, tc.server)
			t.Run("TheRightCredentialsRelayEvents", func(t *testing.T) {
				d := setup(t)
				d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders.placed', 'o1', 'a')`)
				env, args := tc.right(addr)
				res := relayWithSecrets(t, d, 1, env, tc.secrets,
					append(args, "--nats-create-stream", "EVENTS", "--nats-stream-subjects", "orders.>")...)
				require.Contains(t, res.stdout, "relay stopped: 1 published")
				nc, err := nats.Connect("nats://"+addr, tc.client...)
				require.NoError(t, err)
				defer nc.Close()
				js, err := jetstream.New(nc)
				require.NoError(t, err)
				st, err := js.Stream(context.Background(), "EVENTS")
				require.NoError(t, err)
				info, err := st.Info(context.Background())
				require.NoError(t, err)
				require.EqualValues(t, 1, info.State.Msgs)
			})
			t.Run("WrongCredentialsStopTheStart", func(t *testing.T) {
				d := setup(t)
				env, args := tc.wrong(addr)
				refusedAtStart(t, d, env, "refused the credentials", tc.secrets, args...)
			})
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The NATS client gets the server URLs without user information or
// Herald's options (it would ignore the options, and take a user name
// without a password for a token): those go in as the client's options.
func TestNATSServerURLsCarryNoCredentialsNorHeraldsOptions(t *testing.T) {
	t.Parallel()
	nkeyPub, seed := testenv.NATSUser(t)
	nk := writeFile(t, "user.nk", seed)
	var out bytes.Buffer
	inv := fuzzInvocation(&out)
	inv.getenv = func(name string) (string, bool) {
		if name == "HERALD_DESTINATION_EVENTS_PASSWORD" {
			return "pw-from-env", true
		}
		return "", false
	}
	for _, tc := range []struct {
		name, raw string
		servers   []string
		check     func(t *testing.T, o *nats.Options)
	}{
		{"events", "nats://herald@127.0.0.1:4222,nats://herald@127.0.0.1:4223", []string{"nats://127.0.0.1:4222", "nats://127.0.0.1:4223"},
			func(t *testing.T, o *nats.Options) {
				require.Equal(t, "herald", o.User)
				require.Equal(t, "pw-from-env", o.Password)
				require.Empty(t, o.Token, "with the password variable set, the user is a user")
			}},
		{"other", "tls://127.0.0.1:4222?nkey_file=" + url.QueryEscape(nk), []string{"tls://127.0.0.1:4222"},
			func(t *testing.T, o *nats.Options) {
				require.Equal(t, nkeyPub, o.Nkey)
				require.Empty(t, o.User+o.Password+o.Token)
			}},
	} {
		ep, err := parseEndpoint(inv, "--destination "+tc.name, tc.name, tc.raw)
		require.NoError(t, err)
		c := ep.spec.Target().(*heraldnats.URLConfig)
		require.Equal(t, tc.servers, c.Options.Servers)
		tc.check(t, &c.Options)
	}
}

// The seed of an nkey file is kept out of every line the daemon prints,
// as a password is: heraldnats hands it to the destination's OnSecret.
func TestAnNkeySeedIsRedactedLikeAPassword(t *testing.T) {
	t.Parallel()
	_, seed := testenv.NATSUser(t)
	path := filepath.Join(t.TempDir(), "user.nk")
	require.NoError(t, os.WriteFile(path, seed, 0o600))
	inv := &invocation{stderr: &redactor{w: &bytes.Buffer{}}, flags: newFlagSet("relay"),
		getenv: func(string) (string, bool) { return "", false }}
	_, err := parseEndpoint(inv, "--destination events", "events", "nats://127.0.0.1:4222?nkey_file="+url.QueryEscape(path))
	require.NoError(t, err)
	require.Equal(t, "a log line quoting xxxxx", inv.stderr.scrub("a log line quoting "+string(seed)))
}
