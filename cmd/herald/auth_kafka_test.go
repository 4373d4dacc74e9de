package main

import (
	"context"
	"crypto/tls"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kafkaMechanism is a SASL mechanism as kfake names it and as a client
// authenticates with it.
func kafkaMechanism(name, user, password string) sasl.Mechanism {
	switch name {
	case "PLAIN":
		return plain.Auth{User: user, Pass: password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	}
	return scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
}

// readKafka reads the records of topic from the start, as the given
// client options allow, until it has n.
func readKafka(t *testing.T, addrs []string, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n && ctx.Err() == nil {
		got = append(got, cl.PollFetches(ctx).Records()...)
	}
	require.Len(t, got, n)
	return got
}

// Kafka destinations authenticate with SASL PLAIN, SCRAM-SHA-256 or
// SCRAM-SHA-512, over plaintext, TLS or mutual TLS, against kfake
// configured for it: the right credentials relay events end to end; wrong
// ones stop the relay at once in one line; the password shows nowhere.
func TestRelayAuthenticatesToKafka(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, clientCert, clientKey := pki.issue(t, "herald-client", true)
	const user = "herald-relay"
	for _, tc := range []struct {
		name      string
		mechanism string
		tls       string // "", "tls" or "mtls"
		publisher bool   // --publisher and HERALD_KAFKA_PASSWORD, else --destination events and HERALD_DESTINATION_EVENTS_PASSWORD
		fromFile  bool   // the password from the variable's _FILE twin
	}{
		{name: "PlainOverTLSWithTheCAFile", mechanism: "PLAIN", tls: "tls", publisher: true, fromFile: true},
		{name: "ScramSHA256InPlaintext", mechanism: "SCRAM-SHA-256"},
		{name: "ScramSHA512OverMutualTLS", mechanism: "SCRAM-SHA-512", tls: "mtls", publisher: true},
		{name: "ScramSHA512WithThePasswordFromAFile", mechanism: "SCRAM-SHA-512", tls: "tls", fromFile: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			password := "kafka-Pw-" + tc.name + "-7731"
			opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.placed"), kfake.EnableSASL(),
				kfake.Superuser(tc.mechanism, user, password)}
			readOpts := []kgo.Opt{kgo.SASL(kafkaMechanism(tc.mechanism, user, password))}
			query := url.Values{"sasl": {tc.mechanism}}
			if tc.tls != "" {
				opts = append(opts, kfake.TLS(pki.serverTLS(t, tc.tls == "mtls")))
				query.Set("ca_file", pki.CAFile)
				readCfg := &tls.Config{RootCAs: pki.pool, MinVersion: tls.VersionTLS12}
				if tc.tls == "mtls" {
					query.Set("cert_file", clientCert)
					query.Set("key_file", clientKey)
					pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
					require.NoError(t, err)
					readCfg.Certificates = []tls.Certificate{pair}
				}
				readOpts = append(readOpts, kgo.DialTLSConfig(readCfg))
			}
			kc, err := kfake.NewCluster(opts...)
			require.NoError(t, err)
			t.Cleanup(kc.Close)
			raw := "kafka://" + user + "@" + kc.ListenAddrs()[0] + "?" + query.Encode()
			variable, args := "HERALD_DESTINATION_EVENTS_PASSWORD", []string{"--destination", "events=" + raw}
			if tc.publisher {
				variable, args = "HERALD_KAFKA_PASSWORD", []string{"--publisher", raw}
			}
			env := func(password string) map[string]string {
				if tc.fromFile {
					path := filepath.Join(t.TempDir(), "password")
					require.NoError(t, os.WriteFile(path, []byte(password+"\n"), 0o600))
					return map[string]string{variable + "_FILE": path}
				}
				return map[string]string{variable: password}
			}

			t.Run("TheRightCredentialsRelayEvents", func(t *testing.T) {
				d := setup(t)
				d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders.placed', 'o1', 'a')`)
				res := relayWithSecrets(t, d, 1, env(password), []string{password}, args...)
				require.Contains(t, res.stdout, "relay stopped: 1 published")
				got := readKafka(t, kc.ListenAddrs(), "orders.placed", 1, readOpts...)
				require.Equal(t, "o1", string(got[0].Key))
			})
			t.Run("AWrongPasswordStopsTheStart", func(t *testing.T) {
				d := setup(t)
				wrong := password + "-wrong"
				refusedAtStart(t, d, env(wrong), "refused the credentials", []string{wrong, password}, args...)
			})
		})
	}

	t.Run("AServerWithoutTheRelaysCertificateRefusesIt", func(t *testing.T) {
		t.Parallel()
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.placed"), kfake.TLS(pki.serverTLS(t, true)))
		require.NoError(t, err)
		t.Cleanup(kc.Close)
		d := setup(t)
		refusedAtStart(t, d, nil, "refused the credentials", nil,
			"--publisher", "kafka://"+kc.ListenAddrs()[0]+"?ca_file="+url.QueryEscape(pki.CAFile))
	})
	t.Run("AnUntrustedServerCertificateStopsTheStart", func(t *testing.T) {
		t.Parallel()
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.placed"), kfake.TLS(pki.serverTLS(t, false)))
		require.NoError(t, err)
		t.Cleanup(kc.Close)
		d := setup(t)
		refusedAtStart(t, d, nil, "the server's certificate is not trusted (give its CA as ca_file=)", nil,
			"--publisher", "kafka://"+kc.ListenAddrs()[0]+"?tls=true")
	})
}
