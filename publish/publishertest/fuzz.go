package publishertest

import (
	"testing"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
)

// FuzzEvent builds, from a publisher's fuzz inputs, the event a Writer
// would store, and reports false when a Writer would refuse it: what a
// publisher's message builder must turn into a message its Parse reads
// back. id fills a UUID (short input is padded with zeros); an empty header
// name means no header. Every publisher's fuzz test takes the same inputs,
// seeded by AddFuzzSeeds, so that all of them are checked against the same
// events:
//
//	func FuzzParse(f *testing.F) {
//		publishertest.AddFuzzSeeds(f)
//		f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string,
//			payload []byte, header1, value1, header2, value2, prefix string) {
//			env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
//			...
//		})
//	}
func FuzzEvent(id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
	header1, value1, header2, value2 string) (herald.Envelope, bool) {
	var u uuid.UUID
	copy(u[:], id)
	m := herald.Message{
		ID: u.String(), Topic: topic, Key: key, Type: typ,
		AggregateType: aggregateType, AggregateID: aggregateID, Payload: payload,
	}
	for _, h := range [...]struct{ name, v string }{{header1, value1}, {header2, value2}} {
		if h.name == "" {
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[h.name] = h.v
	}
	msgs, err := herald.Prepare([]herald.Message{m}, 0)
	if err != nil {
		return herald.Envelope{}, false
	}
	return herald.Envelope{Message: msgs[0], Attempt: 1}, true
}

// AddFuzzSeeds adds seeds of FuzzEvent's inputs, then a prefix (a subject,
// topic or stream prefix, for the publishers that have one), to f.
func AddFuzzSeeds(f *testing.F) {
	id := uuid.MustParse("0190d5a3-7c1e-7b4a-9f00-0123456789ab")
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, s := range []struct {
		topic, key, typ, aggregateType, aggregateID string
		payload                                     []byte
		header1, value1, header2, value2, prefix    string
	}{
		{"orders.placed", "order-42", "order.placed", "order", "42", []byte(`{"id":42}`),
			"X-Tenant", "acme", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"t", "", "", "", "", nil, "", "", "", "", "prod"},
		{"orders", " padded key ", "é\ttab", "agg/type", "a:b", all, "X-Padded", "  two spaces  ", "X-Empty", "", "p"},
		{"a-b_c", "k", "", "", "", []byte{}, "x-a", "lower", "X-A", "upper", "prod.eu"},
		{"t", "k", "", "", "", []byte("x"), "Herald-Key", "forged", "CC", "other-queue", ""},
		{"t", "k", "", "", "", []byte("x"), "X-First-Death-Reason", "mine", "Content-Type", "text/plain", ""},
		{"t", "k", "", "", "", []byte("x"), "X-Bad", "\xff", "X-Ctl", "\x01", ""},
		{"", "k", "", "", "", nil, "", "", "", "", ""},
		{"weird topic", "k", "", "", "", nil, "", "", "", "", ""},
	} {
		f.Add(id[:], s.topic, s.key, s.typ, s.aggregateType, s.aggregateID, s.payload, s.header1, s.value1, s.header2, s.value2, s.prefix)
	}
}
