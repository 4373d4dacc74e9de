package heraldcdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	kit "github.com/herald-outbox/herald/heraldtest" // the users' test kit (Recorder), not internal/testenv
)

// startFailOnceRelay runs a relay (startRelay) on f's outbox that reads
// a new change stream (cdcSource) and publishes to a Recorder, which
// fails the event whose payload is failing once, with an ordinary,
// retried error.
func startFailOnceRelay(t *testing.T, f fixture, failing string) *kit.Recorder {
	t.Helper()
	rec := &kit.Recorder{}
	rec.Fail(kit.Failure{Match: func(env herald.Envelope) bool { return string(env.Payload) == failing }, Times: 1})
	startRelay(t, f.driver(t), f.cdcSource(t), rec)
	return rec
}

// waitAllPublished waits until the Recorder confirmed every event of
// byKey (key -> ids).
func waitAllPublished(t *testing.T, rec *kit.Recorder, byKey map[string][]string) {
	t.Helper()
	wait, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, rec.WaitUntil(wait, func(results []kit.Result) bool {
		got := map[string]bool{}
		for _, res := range results {
			if res.Err == nil {
				got[res.Envelope.ID] = true
			}
		}
		for _, ids := range byKey {
			for _, id := range ids {
				if !got[id] {
					return false
				}
			}
		}
		return true
	}), "every event committed is published")
}

// firstPublishedByKey returns the ids the Recorder confirmed, by key, in
// the order of each one's first confirmation, and the set of them.
func firstPublishedByKey(rec *kit.Recorder) (map[string][]string, map[string]bool) {
	first := map[string][]string{}
	seen := map[string]bool{}
	for _, env := range rec.Published() {
		if !seen[env.ID] {
			seen[env.ID] = true
			first[env.Key] = append(first[env.Key], env.ID)
		}
	}
	return first, seen
}

// requireFailedOnceThenPublished checks that event id failed with the
// injected error and was then published by the retry: two attempts.
func requireFailedOnceThenPublished(t *testing.T, rec *kit.Recorder, id string) {
	t.Helper()
	var outcomes []error
	for _, res := range rec.Results() {
		if res.Envelope.ID == id {
			outcomes = append(outcomes, res.Err)
		}
	}
	require.Len(t, outcomes, 2)
	require.ErrorIs(t, outcomes[0], kit.ErrInjected)
	require.NoError(t, outcomes[1])
}
