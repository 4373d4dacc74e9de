package heraldmqtt_test

import (
	"crypto/tls"
	"log"
	"net/url"
	"os"

	"github.com/eclipse/paho.golang/autopaho"

	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

// The publisher from autopaho's configuration, over TLS: it makes and
// keeps a connection of its own. It needs a live broker, so it is
// compiled, not run.
func ExampleNew() {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	password := os.Getenv("MQTT_PASSWORD")
	u, _ := url.Parse("mqtts://broker:8883")
	pub, err := heraldmqtt.New(autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, TlsCfg: tlsConfig,
		ConnectUsername: "herald", ConnectPassword: []byte(password),
	}, &heraldmqtt.Config{TopicPrefix: "events/", TopicMapping: heraldmqtt.TopicDotsToSlashes})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
}
