package herald

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// retryAfter is a publisher error that knows when to come back.
type retryAfter time.Duration

func (r retryAfter) Error() string             { return "slow down" }
func (r retryAfter) RetryAfter() time.Duration { return time.Duration(r) }

func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	policy := RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 3, MaxAge: time.Hour}
	ev := func(id, topic, key string, attempt int, ordered bool) Envelope {
		return Envelope{Message: Message{ID: id, Topic: topic, Key: key}, Attempt: attempt, Ordered: ordered,
			CreatedAt: now.Add(-time.Minute)}
	}
	old := ev("old", "t", "o", 1, true)
	old.CreatedAt = now.Add(-2 * time.Hour)
	oldUnordered := old
	oldUnordered.ID, oldUnordered.Ordered = "old-u", false
	nack, down := errors.New("nack"), errors.New("connection refused")

	type want struct {
		outcome Outcome
		delay   time.Duration
	}
	for _, tc := range []struct {
		name        string
		batch       []Envelope
		errs        []error
		rules       func(r *decideRules)
		want        map[string]want // by id; OutcomePublished for confirmed
		outage      bool
		orderBroken int
	}{
		{
			name:  "ConfirmedEventsArePublished",
			batch: []Envelope{ev("a", "t", "k", 1, true), ev("b", "t", "", 1, false)},
			errs:  []error{nil, nil},
			want:  map[string]want{"a": {OutcomePublished, 0}, "b": {OutcomePublished, 0}},
		},
		{
			name:  "AFailureIsRetriedWithBackoffAndHoldsBackItsKeyOnly",
			batch: []Envelope{ev("a1", "t", "a", 2, true), ev("b1", "t", "b", 1, true), ev("a2", "t", "a", 1, true)},
			errs:  []error{nack, nil, nil},
			want: map[string]want{
				"a1": {OutcomeRetry, 2 * time.Second}, "b1": {OutcomePublished, 0},
				"a2": {OutcomePublished, 0}, // on the broker already: counted, and reported as broken order
			},
			orderBroken: 1,
		},
		{
			name:  "EventsBehindAFailureAreHeldBackWhateverTheirOwnError",
			batch: []Envelope{ev("a1", "t", "a", 1, true), ev("a2", "t", "a", 1, true), ev("a3", "t", "a", 1, true)},
			errs:  []error{nack, Permanent(errors.New("too large")), ErrHeldBack},
			want:  map[string]want{"a1": {OutcomeRetry, time.Second}, "a2": {OutcomeHeldBack, 0}, "a3": {OutcomeHeldBack, 0}},
		},
		{
			name:  "UnorderedEventsHoldNothingBack",
			batch: []Envelope{ev("u1", "t", "a", 1, false), ev("u2", "t", "a", 1, false)},
			errs:  []error{nack, Permanent(errors.New("too large"))},
			want:  map[string]want{"u1": {OutcomeRetry, time.Second}, "u2": {OutcomeDead, 0}},
		},
		{
			name:  "APermanentErrorIsDeadAndParksAnOrderedKey",
			batch: []Envelope{ev("a1", "t", "a", 1, true), ev("s1", "skip", "a", 1, true), ev("n1", "t", "", 1, false)},
			errs:  []error{Permanent(nack), Permanent(nack), Permanent(nack)},
			rules: func(r *decideRules) { r.SkipDead = map[string]bool{"skip": true} },
			want:  map[string]want{"a1": {OutcomeParked, 0}, "s1": {OutcomeDead, 0}, "n1": {OutcomeDead, 0}},
		},
		{
			name:  "TheLastAttemptIsDead",
			batch: []Envelope{ev("a", "t", "a", 3, true), ev("b", "t", "", 3, false), ev("c", "t", "c", 2, true)},
			errs:  []error{nack, nack, nack},
			want:  map[string]want{"a": {OutcomeParked, 0}, "b": {OutcomeDead, 0}, "c": {OutcomeRetry, 2 * time.Second}},
		},
		{
			// Only MaxAge can make an event dead while the broker is away.
			name:   "AnOutageOnTheLastAttemptIsRefundedNotFatal",
			batch:  []Envelope{ev("a", "t", "a", 3, true), ev("b", "t", "b", 1, true)},
			errs:   []error{down, down},
			rules:  func(r *decideRules) { r.Outage = down },
			want:   map[string]want{"a": {OutcomeOutage, 100 * time.Millisecond}, "b": {OutcomeOutage, 100 * time.Millisecond}},
			outage: true,
		},
		{
			name:   "PastMaxAgeTheFirstFailureIsFatalEvenAnOutages",
			batch:  []Envelope{old, oldUnordered, ev("young", "t", "y", 1, true)},
			errs:   []error{down, down, down},
			rules:  func(r *decideRules) { r.Outage = down },
			want:   map[string]want{"old": {OutcomeParked, 0}, "old-u": {OutcomeDead, 0}, "young": {OutcomeOutage, 100 * time.Millisecond}},
			outage: true,
		},
		{
			name:  "MaxAgeCountsFromTheEndOfAPauseOfTheTopic",
			batch: []Envelope{old, func() Envelope { e := old; e.ID, e.Topic = "old-other", "other"; return e }()},
			errs:  []error{nack, nack},
			rules: func(r *decideRules) {
				r.Resumed = func(topic string) time.Time {
					if topic == "t" {
						return now.Add(-10 * time.Minute) // paused for most of its two hours
					}
					return time.Time{}
				}
			},
			want: map[string]want{"old": {OutcomeRetry, time.Second}, "old-other": {OutcomeParked, 0}},
		},
		{
			name:   "ATimeoutIsAnOutage",
			batch:  []Envelope{ev("a", "t", "a", 3, true)},
			errs:   []error{fmt.Errorf("no ack: %w", context.DeadlineExceeded)},
			want:   map[string]want{"a": {OutcomeOutage, 100 * time.Millisecond}},
			outage: true,
		},
		{
			name:  "AnUnavailableDestinationPausesItsEventsOnly",
			batch: []Envelope{ev("a", "t", "a", 3, true), ev("b", "t", "b", 1, true)},
			errs:  []error{Unavailable(down), nil},
			want:  map[string]want{"a": {OutcomeOutage, 5 * time.Second}, "b": {OutcomePublished, 0}},
		},
		{
			name:  "RetryAfterLengthensTheDelayWithinTheCap",
			batch: []Envelope{ev("a", "t", "a", 1, true), ev("b", "t", "b", 1, true)},
			errs:  []error{retryAfter(30 * time.Second), retryAfter(time.Hour)},
			want:  map[string]want{"a": {OutcomeRetry, 30 * time.Second}, "b": {OutcomeRetry, time.Minute}},
		},
		{
			name:  "StoppingReleasesWhatTheBrokerDidNotConfirm",
			batch: []Envelope{ev("a1", "t", "a", 1, true), ev("a2", "t", "a", 1, true), ev("b", "t", "b", 1, true), ev("c", "t", "c", 1, true)},
			errs:  []error{context.Canceled, context.Canceled, nil, Permanent(nack)},
			rules: func(r *decideRules) { r.Aborted = true },
			want: map[string]want{"a1": {OutcomeReleased, 0}, "a2": {OutcomeReleased, 0}, "b": {OutcomePublished, 0},
				"c": {OutcomeParked, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outages := 0
			r := decideRules{
				Now: now, Policy: policy, Unavailable: 5 * time.Second,
				OutageDelay: func(string) time.Duration { outages++; return 100 * time.Millisecond },
				Backoff: func(attempt int) time.Duration {
					return policy.Base << (attempt - 1) // no jitter: the table fixes it
				},
			}
			if tc.rules != nil {
				tc.rules(&r)
			}
			d := decide(tc.batch, tc.errs, r)
			got := map[string]want{}
			for _, id := range d.Params.Published {
				got[id] = want{OutcomePublished, 0}
			}
			for _, f := range d.Params.Failed {
				require.NotContains(t, got, f.ID, "one outcome per event")
				got[f.ID] = want{f.Outcome, f.Delay}
				require.Equal(t, f.Outcome.KeepsLastError(), f.Error == "" || f.Outcome == OutcomeHeldBack,
					"%s: an error message exactly where one is kept", f.ID)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.outage, d.Outage)
			require.Equal(t, map[bool]int{true: 1, false: 0}[tc.outage], outages, "an outage pauses claims once per batch")
			require.Equal(t, tc.orderBroken, d.OrderBroken)
		})
	}
}

func TestOutcomeFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o                    Outcome
		dead, refunded, keep bool
	}{
		{OutcomePublished, false, false, true},
		{OutcomeRetry, false, false, false},
		{OutcomeOutage, false, true, false},
		{OutcomeHeldBack, false, true, true},
		{OutcomeReleased, false, true, true},
		{OutcomeDead, true, false, false},
		{OutcomeParked, true, false, false},
	} {
		require.Equal(t, tc.dead, tc.o.Dead(), tc.o)
		require.Equal(t, tc.refunded, tc.o.Refunded(), tc.o)
		require.Equal(t, tc.keep, tc.o.KeepsLastError(), tc.o)
	}
}
