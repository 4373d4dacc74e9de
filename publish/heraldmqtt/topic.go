package heraldmqtt

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// TopicMapping is how an event topic becomes an MQTT topic name. Either
// way Config.TopicPrefix comes first, and the Herald-Topic property
// carries the event topic as it is, which Parse returns.
type TopicMapping int

const (
	// TopicVerbatim keeps the event topic as it is: "orders.placed" is
	// published to "orders.placed", one level, and a '/' in an event topic
	// separates levels.
	TopicVerbatim TopicMapping = iota
	// TopicDotsToSlashes turns every '.' into '/': "orders.placed" is
	// published to "orders/placed", so that subscribers filter by level
	// ("orders/+", "orders/#").
	TopicDotsToSlashes
)

// String returns the mapping's name, as the daemon's topic-mapping option
// takes it.
func (m TopicMapping) String() string {
	switch m {
	case TopicVerbatim:
		return "verbatim"
	case TopicDotsToSlashes:
		return "dots-to-slashes"
	}
	return fmt.Sprintf("TopicMapping(%d)", int(m))
}

// maxString is the longest UTF-8 string MQTT carries: its length is two
// bytes.
const maxString = 65535

// topicNamer maps event topics to MQTT topic names.
type topicNamer struct {
	prefix     string
	mapping    TopicMapping
	emptyLevel bool
}

func newTopicNamer(prefix string, mapping TopicMapping, allowEmptyLevels bool) (topicNamer, error) {
	n := topicNamer{prefix: prefix, mapping: mapping, emptyLevel: allowEmptyLevels}
	if reason := checkString(prefix); reason != "" {
		return n, fmt.Errorf("heraldmqtt: Config.TopicPrefix %s", reason)
	}
	switch {
	case strings.ContainsAny(prefix, "+#"):
		return n, errors.New("heraldmqtt: Config.TopicPrefix holds a wildcard (+ or #)")
	case strings.HasPrefix(prefix, "$"):
		return n, errors.New("heraldmqtt: Config.TopicPrefix starts with '$', which MQTT reserves for the broker's own topics")
	}
	return n, nil
}

// name returns the MQTT topic name of an event topic, or why it cannot be
// one.
func (n topicNamer) name(topic string) (string, error) {
	if n.mapping == TopicDotsToSlashes {
		topic = strings.ReplaceAll(topic, ".", "/")
	}
	name := n.prefix + topic
	if reason := checkTopic(name, n.emptyLevel); reason != "" {
		return "", fmt.Errorf("MQTT topic name %q %s", name, reason)
	}
	return name, nil
}

// checkTopic returns why name cannot be the topic name of a PUBLISH, or
// "".
func checkTopic(name string, allowEmptyLevels bool) string {
	if name == "" {
		return "is empty"
	}
	if reason := checkString(name); reason != "" {
		return reason
	}
	switch {
	case strings.ContainsAny(name, "+#"):
		return "holds a wildcard (+ or #), which only subscriptions may use"
	case strings.HasPrefix(name, "$"):
		return "starts with '$', which MQTT reserves for the broker's own topics"
	case !allowEmptyLevels && (strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//")):
		return "has an empty level (Config.AllowEmptyLevels allows it)"
	}
	return ""
}

// checkString returns why s cannot travel as an MQTT UTF-8 string, or "".
//
// MQTT forbids U+0000 and says that a receiver may close the connection on
// a control character or a non-character; Mosquitto does, which would fail
// every event of the batch on every retry, so such a string is refused
// before sending.
func checkString(s string) string {
	if len(s) > maxString {
		return fmt.Sprintf("is longer than %d bytes", maxString)
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		switch {
		case r <= 0x1f || (r >= 0x7f && r <= 0x9f):
			return fmt.Sprintf("holds the control character U+%04X, which MQTT brokers refuse", r)
		case (r >= 0xfdd0 && r <= 0xfdef) || r&0xfffe == 0xfffe:
			return fmt.Sprintf("holds the Unicode non-character U+%04X, which MQTT brokers refuse", r)
		}
	}
	return ""
}
