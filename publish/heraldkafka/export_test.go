package heraldkafka

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
)

// Record exposes the record Publish sends for an event, with Config.TopicPrefix
// prefix and no size limit, for the fuzz tests.
func Record(prefix string, env *herald.Envelope) (*kgo.Record, error) {
	return (&Publisher{prefix: prefix}).record(env)
}

// SetHook sets the function a transactional publisher calls at each step of
// a transaction: "begun", "produced" (before the commit), "committed".
func SetHook(p *Publisher, fn func(step string)) { p.hook = fn }
