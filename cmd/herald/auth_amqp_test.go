package main

import (
	"crypto/tls"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// An amqps:// destination end to end on RabbitMQ nodes of the test's own
// that listen with TLS only (testenv.RabbitTLS), as the nodes' user
// with the password from HERALD_DESTINATION_<NAME>_PASSWORD_FILE: with
// ca_file= only on a node that asks for no client certificate, and with
// cert_file= and key_file= on one that refuses a client without a
// certificate of the test's CA. The password shows nowhere. A wrong
// password, a missing client certificate and an untrusted server each end
// the start in one line.
func TestRelayPublishesToRabbitMQOverTLS(t *testing.T) {
	t.Parallel()
	pki := newAuthPKI(t)
	const user, password, queue = "herald-relay", "Rabbit-pw-0077-canary", "herald-tls"
	env := map[string]string{"HERALD_DESTINATION_RABBIT_PASSWORD_FILE": secretFile(t, password)}

	// node starts a node, declares queue on it and returns its address and
	// a channel of the test's own to read the queue.
	node := func(t *testing.T, mutual bool) (string, *amqp.Channel) {
		t.Helper()
		n := testenv.RabbitTLS(t, testenv.RabbitTLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey,
			CAFile: pki.ca, VerifyClients: mutual, User: user, Password: password})
		t.Logf("RabbitMQ node %s took %s to boot", n.Name, n.Boot.Round(time.Millisecond))
		cfg := &tls.Config{RootCAs: pki.pool, ServerName: pki.serverHostname, MinVersion: tls.VersionTLS12}
		if mutual {
			cfg.Certificates = []tls.Certificate{pki.client}
		}
		conn, err := amqp.DialTLS("amqps://"+user+":"+password+"@"+n.Addr+"/", cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclare(queue, false, false, false, false, nil)
		require.NoError(t, err)
		return n.Addr, ch
	}
	// relays has a relay publish one event through url and reads it from
	// the queue; then the password must be in none of its output, metrics
	// or pages.
	relays := func(t *testing.T, ch *amqp.Channel, url string) {
		t.Helper()
		d := setup(t)
		const payload = "over tls"
		d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('`+queue+`', 'k', '`+payload+`')`)
		admin := freeAddr(t)
		r := start(t, env, append([]string{"relay", "--destination", "rabbit=" + url,
			"--admin-addr", admin, "--log-level", "debug", "--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, d.flags...)...)
		waitPublished(t, d, 1)
		var msg amqp.Delivery
		require.Eventually(t, func() bool {
			var ok bool
			var err error
			msg, ok, err = ch.Get(queue, true)
			return err == nil && ok
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, payload, string(msg.Body))
		requireNoSecretServed(t, r, admin, password)
	}
	// failing runs a relay that must end at once with one line saying says.
	outbox := setup(t)
	failing := func(t *testing.T, env map[string]string, url, says string) {
		t.Helper()
		failsAtOnce(t, env, append([]string{"relay", "--destination", "rabbit=" + url, "--log-level", "error"}, outbox.flags...), 1, says, password)
	}
	wrongPassword := map[string]string{"HERALD_DESTINATION_RABBIT_PASSWORD": "not-" + password}

	t.Run("ANodeThatAsksForNoClientCertificate", func(t *testing.T) {
		t.Parallel()
		addr, ch := node(t, false)
		url := func(query string) string { return "amqps://" + user + "@" + addr + "/?" + query }
		t.Run("TakesTheEventsOfARelayTrustingItsCA", func(t *testing.T) {
			relays(t, ch, url(pki.query(false)))
		})
		t.Run("IsNotTrustedWithTheCAFileOfAnotherCAOrTheSystemsRoots", func(t *testing.T) {
			t.Parallel()
			failing(t, env, url("ca_file="+pki.otherCA), "the TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority")
			failing(t, env, url(""), "x509: certificate signed by unknown authority")
		})
		t.Run("RefusesAWrongPasswordInOneLine", func(t *testing.T) {
			t.Parallel()
			failing(t, wrongPassword, url(pki.query(false)), "refused the credentials")
		})
	})

	t.Run("ANodeThatVerifiesClientCertificates", func(t *testing.T) {
		t.Parallel()
		addr, ch := node(t, true)
		url := func(query string) string { return "amqps://" + user + "@" + addr + "/?" + query }
		t.Run("TakesTheEventsOfARelayShowingItsCertificate", func(t *testing.T) {
			relays(t, ch, url(pki.query(true)))
		})
		t.Run("RefusesARelayWithoutAClientCertificateInOneLine", func(t *testing.T) {
			t.Parallel()
			failing(t, env, url(pki.query(false)), "the TLS handshake failed: remote error: tls: certificate required (check the URL's ca_file, cert_file and key_file)")
		})
		t.Run("RefusesAWrongPasswordInOneLine", func(t *testing.T) {
			t.Parallel()
			failing(t, wrongPassword, url(pki.query(true)), "refused the credentials")
		})
	})
}
