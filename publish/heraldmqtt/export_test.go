package heraldmqtt

import (
	"log/slog"

	"github.com/eclipse/paho.golang/paho"

	"github.com/herald-outbox/herald"
)

// Message exposes the PUBLISH packet Publish sends for an event, with the
// default Config but for the topic prefix, for the fuzz tests.
func Message(prefix string, env *herald.Envelope) (*paho.Publish, error) {
	namer, err := newTopicNamer(prefix, TopicVerbatim, false)
	if err != nil {
		return nil, err
	}
	p := &Publisher{topics: namer, maxPacket: MaxPacketBytes, log: slog.New(slog.DiscardHandler)}
	return p.message(env, 0)
}

// TopicName exposes the mapping of an event topic to an MQTT topic name.
func TopicName(prefix string, mapping TopicMapping, allowEmptyLevels bool, topic string) (string, error) {
	namer, err := newTopicNamer(prefix, mapping, allowEmptyLevels)
	if err != nil {
		return "", err
	}
	return namer.name(topic)
}

// Refused exposes how a PUBACK's reason code is reported to the relay.
func Refused(code byte) error { return refused(&ReasonError{Code: code}) }

// PacketSize exposes the size of a PUBLISH packet on the wire.
func PacketSize(pub *paho.Publish) int { return packetSize(pub) }
