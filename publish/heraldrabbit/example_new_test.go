package heraldrabbit_test

import (
	"crypto/tls"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// The publisher from a DialFunc, over TLS: Dialer makes one from a URI and
// the client's amqp.Config, and the publisher calls it again whenever its
// connection is lost. It needs a live broker, so it is compiled, not run.
func ExampleNew() {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	dial, err := heraldrabbit.Dialer("amqps://herald:secret@rabbit:5671/", amqp.Config{TLSClientConfig: tlsConfig})
	if err != nil {
		log.Fatal(err)
	}
	pub, err := heraldrabbit.New(dial, &heraldrabbit.Config{Exchange: "events"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
}
