package heraldpubsub

import (
	"sync"

	"cloud.google.com/go/pubsub/v2"
)

// keyRef is an ordering key of one topic: the client pauses keys per topic.
type keyRef struct{ topic, key string }

// keyState is what inFlight knows of one ordering key.
type keyState struct {
	pending int  // messages handed to the client and not yet answered
	failed  bool // one of them failed: the client paused the key
}

// inFlight counts, per ordering key, the messages the client holds, and
// resumes a key the client paused once it holds none of them.
//
// Resuming any earlier would break the key's order. Say events e1 and e2
// of a key are queued in the client and e1's request fails: the client
// pauses the key, and e2, when its turn comes, fails unsent. Were the key
// resumed as soon as e1's failure is seen, e2 could still be queued and
// would go out after e1 failed; the relay would then publish e1 again
// behind it. Waiting until the key has nothing in flight (across every
// Publish call, including one that stopped waiting when its ctx ended)
// leaves only messages handed over after the failure, which the relay sends
// in order.
type inFlight struct {
	mu   sync.Mutex
	keys map[keyRef]*keyState
}

// begin counts a message about to be handed to the client.
func (f *inFlight) begin(ref keyRef) {
	if ref.key == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.keys[ref]
	if st == nil {
		st = &keyState{}
		f.keys[ref] = st
	}
	st.pending++
}

// end counts a message answered, failed or not, and resumes its key on pub
// when the key has nothing left in flight after a failure.
func (f *inFlight) end(pub *pubsub.Publisher, ref keyRef, failed bool) {
	if ref.key == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.keys[ref]
	if st == nil {
		return
	}
	st.pending--
	st.failed = st.failed || failed
	if st.pending > 0 {
		return
	}
	delete(f.keys, ref)
	if st.failed {
		// A message handed over from here on came after the failure:
		// the resume may let it go out.
		pub.ResumePublish(ref.key)
	}
}
