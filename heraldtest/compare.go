package heraldtest

import (
	"fmt"
	"strings"

	"github.com/herald-outbox/herald"
)

// maxListed bounds the events a failure message lists one by one.
const maxListed = 20

// inScope reports whether env is one of the events an assertion accounts
// for: those whose topic and key agree with some expected event's (an
// empty Topic or Key agrees with any). Events outside the scope, such as
// other tests' rows in a shared database, are ignored.
func inScope(want []expectation, env herald.Envelope) bool {
	for _, x := range want {
		if (x.Topic == "" || x.Topic == env.Topic) && (x.Key == "" || x.Key == env.Key) {
			return true
		}
	}
	return false
}

// topicsOf returns the topics a read may be narrowed to: those of the
// events, or nil (every topic) when one of them leaves its topic open.
func topicsOf(events []Event) []string {
	var topics []string
	seen := map[string]bool{}
	for _, e := range events {
		if e.Topic == "" {
			return nil
		}
		if !seen[e.Topic] {
			seen[e.Topic] = true
			topics = append(topics, e.Topic)
		}
	}
	return topics
}

// match pairs every expected event with a distinct event of got in
// scope, if it can, and reports what is missing or unexpected when it
// cannot. It returns the indexes in got of the matched events, in the
// order of want. wider, when
// not nil, holds more events than got (a read that was not narrowed to the
// expected topics): it is searched for the nearest event to a missing one,
// so that an event written on the wrong topic shows up in the message.
func match(what string, want []expectation, got, wider []herald.Envelope) ([]int, string) {
	var scoped []int // indexes in got
	for j, env := range got {
		if inScope(want, env) {
			scoped = append(scoped, j)
		}
	}
	fits := make([][]bool, len(want))
	for i, x := range want {
		fits[i] = make([]bool, len(scoped))
		for k, j := range scoped {
			fits[i][k] = len(x.mismatches(got[j])) == 0
		}
	}
	// A maximum bipartite matching by augmenting paths: the first fit is
	// not always right, since a loose expectation (a topic only) may take
	// the one event a precise one needs. Sizes are a test's handful.
	owner := make([]int, len(scoped)) // expected event that holds scoped[k], or -1
	for k := range owner {
		owner[k] = -1
	}
	var augment func(i int, seen []bool) bool
	augment = func(i int, seen []bool) bool {
		for k := range scoped {
			if !fits[i][k] || seen[k] {
				continue
			}
			seen[k] = true
			if owner[k] < 0 || augment(owner[k], seen) {
				owner[k] = i
				return true
			}
		}
		return false
	}
	matchedBy := make([]int, len(want)) // k in scoped, or -1
	for i := range want {
		matchedBy[i] = -1
		augment(i, make([]bool, len(scoped)))
	}
	var unexpected []int // indexes in got
	for k, i := range owner {
		if i >= 0 {
			matchedBy[i] = k
		} else {
			unexpected = append(unexpected, scoped[k])
		}
	}
	missing := 0
	for _, k := range matchedBy {
		if k < 0 {
			missing++
		}
	}
	if missing == 0 && len(unexpected) == 0 {
		out := make([]int, len(want))
		for i, k := range matchedBy {
			out[i] = scoped[k]
		}
		return out, ""
	}

	var b strings.Builder
	fmt.Fprintf(&b, "heraldtest: %s does not hold the expected events: %d expected, %d found on their topics and keys",
		what, len(want), len(scoped))
	taken := map[int]int{} // index in got -> expected event (1-based) it is matched to
	for i, k := range matchedBy {
		if k >= 0 {
			taken[scoped[k]] = i + 1
		}
	}
	// pool is where a missing event's nearest is looked for; inGot maps
	// its indexes to got's. A Recorder's events may repeat an id (a
	// duplicate delivery), so indexes, not ids, tell events apart; the
	// wider read is of a table, where ids are unique.
	pool, inGot := got, func(p int) int { return p }
	if wider != nil {
		byID := make(map[string]int, len(got))
		for j, env := range got {
			byID[env.ID] = j
		}
		pool, inGot = wider, func(p int) int {
			if j, ok := byID[wider[p].ID]; ok {
				return j
			}
			return -1
		}
	}
	shown := map[int]bool{} // indexes in got shown as the nearest to a missing event
	for i, x := range want {
		if matchedBy[i] >= 0 {
			continue
		}
		fmt.Fprintf(&b, "\n  missing: expected event %d %s", i+1, x.Event)
		text, j := nearest(x, pool, inGot, taken)
		b.WriteString(text)
		shown[j] = true
	}
	listed := 0
	for _, j := range unexpected {
		if shown[j] {
			continue // already in the message, with how it differs
		}
		if listed++; listed > maxListed {
			fmt.Fprintf(&b, "\n  ... and more unexpected events")
			break
		}
		b.WriteString("\n  unexpected: " + describe(got[j]))
	}
	if len(pool) == 0 {
		fmt.Fprintf(&b, "\n  (%s holds no events at all)", what)
	}
	return nil, b.String()
}

// nearest describes the event of pool closest to x, and how it differs,
// among those not matched to another expected event, and returns its index
// in got (-1 when it is not there, or when there is none).
func nearest(x expectation, pool []herald.Envelope, inGot func(int) int, taken map[int]int) (string, int) {
	best, bestN := -1, 0
	var bestWhy []string
	for p, env := range pool {
		why := x.mismatches(env)
		if owner, ok := taken[inGot(p)]; ok {
			if len(why) == 0 {
				return fmt.Sprintf("\n    it matches %s, which expected event %d accounts for: "+
					"expected twice, found once?", describe(env), owner), -1
			}
			continue
		}
		if best < 0 || len(why) < bestN {
			best, bestN, bestWhy = p, len(why), why
		}
	}
	if best < 0 {
		return "", -1
	}
	return fmt.Sprintf("\n    nearest: %s\n      %s", describe(pool[best]), strings.Join(bestWhy, "; ")), inGot(best)
}

// forbidden lists the events of got that match one of the events a test
// says must not be there, or "" when there are none.
func forbidden(what string, notWant []expectation, got []herald.Envelope) string {
	var b strings.Builder
	n := 0
	for _, env := range got {
		for _, x := range notWant {
			if len(x.mismatches(env)) != 0 {
				continue
			}
			if n == 0 {
				fmt.Fprintf(&b, "heraldtest: %s holds events it should not", what)
			}
			if n++; n <= maxListed {
				fmt.Fprintf(&b, "\n  %s", describe(env))
				if len(notWant) > 1 || x.String() != anyEvent {
					fmt.Fprintf(&b, "\n    matches %s", x.Event)
				}
			}
			break
		}
	}
	if n > maxListed {
		fmt.Fprintf(&b, "\n  ... %d in all", n)
	}
	return b.String()
}
