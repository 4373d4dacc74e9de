package heraldredis

import "github.com/herald-outbox/herald"

// Entry exposes the stream and the script arguments Publish sends for an
// event, with Config.StreamPrefix prefix, for the fuzz tests.
func Entry(prefix string, env *herald.Envelope) (string, []any, error) {
	return (&Publisher{prefix: prefix, maxPayload: DefaultMaxPayloadBytes}).entry(env)
}
