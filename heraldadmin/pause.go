package heraldadmin

import (
	"slices"

	"github.com/herald-outbox/herald"
)

// Held is a pause in force and the ready events it holds.
type Held struct {
	herald.Pause
	// Waiting counts the ready events the pause holds; -1 for a
	// destination when which topics route to it is not known.
	Waiting int64
	// Topics are the topics with ready events the pause holds, in order.
	Topics []string
}

// HeldBy returns the pauses in force, in the order given, each with the
// ready events it holds according to backlog (Admin.Backlog, or any
// per-topic ready counts). destinationOf names the destination a topic
// routes to (heraldroute.Router.DestinationOf); nil leaves destinations'
// counts unknown. The herald CLI, the admin page and the metrics all count
// with it.
func HeldBy(pauses []herald.Pause, backlog []TopicBacklog, destinationOf func(topic string) string) []Held {
	var out []Held
	for _, p := range pauses {
		if !p.Paused {
			continue
		}
		h := Held{Pause: p}
		if p.Kind == herald.PauseDestination && destinationOf == nil {
			h.Waiting = -1
			out = append(out, h)
			continue
		}
		for _, b := range backlog {
			holds := b.Topic == p.Name
			if p.Kind == herald.PauseDestination {
				holds = destinationOf(b.Topic) == p.Name
			}
			if holds && b.Ready > 0 {
				h.Waiting += b.Ready
				h.Topics = append(h.Topics, b.Topic)
			}
		}
		slices.Sort(h.Topics)
		out = append(out, h)
	}
	return out
}
