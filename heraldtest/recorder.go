package heraldtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/herald-outbox/herald"
)

// ErrInjected is the error a Failure reports when it names none.
var ErrInjected = errors.New("heraldtest: injected failure")

// Recorder is a herald.Publisher for tests. It records every envelope it
// is given, confirms each one unless a Failure says otherwise, and keeps
// the contract of herald.Publisher: once an event of a key fails, the
// later events of that key (same topic, non-empty key) in the batch are
// reported with herald.ErrHeldBack and not recorded as published.
//
// The zero Recorder is ready to use and confirms everything. It is safe
// for concurrent use, as a relay needs; it must not be copied after first
// use.
type Recorder struct {
	mu        sync.Mutex
	results   []Result
	published int
	failures  []*failure
	// changed is closed, and forgotten, whenever results grow: a waiter
	// takes the current channel under mu, checks its condition, and waits
	// on that channel, so that no change between the check and the wait
	// goes unnoticed.
	changed chan struct{}
}

// Result is what became of one envelope handed to the Recorder.
type Result struct {
	Envelope herald.Envelope
	// Err is nil when the envelope was confirmed (published), else the
	// error reported for it.
	Err error
}

// Failure tells a Recorder which envelopes to fail, and how.
type Failure struct {
	// Match selects the envelopes to fail; nil selects every envelope.
	// An Event's Matches method fits: heraldtest.Event{ID: id}.Matches.
	Match func(herald.Envelope) bool
	// Err is reported for a failed envelope. Wrap it with herald.Permanent
	// to make the relay send the event to the dead letters; an ordinary
	// error is retried. Defaults to ErrInjected.
	Err error
	// Times is how many envelopes the Failure fails (batches when
	// WholeBatch) before it stops. Zero or less means every time: the
	// event never gets through.
	Times int
	// WholeBatch fails the whole batch, when it holds a matching envelope,
	// with Err as a plain error (not a *herald.BatchError): what a
	// publisher reports when its broker is unreachable, which a relay
	// treats as an outage (unless Err is marked herald.Permanent).
	WholeBatch bool
}

type failure struct {
	Failure
	left int // failures to go; counts down from Times when Times > 0
}

// Fail adds a Failure. Failures are consulted in the order they were
// added; the first that matches an envelope, and has failures left,
// decides.
func (r *Recorder) Fail(f Failure) {
	if f.Err == nil {
		f.Err = ErrInjected
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, &failure{Failure: f, left: f.Times})
}

// ClearFailures removes every Failure: from now on, every envelope is
// confirmed.
func (r *Recorder) ClearFailures() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = nil
}

// Publish implements herald.Publisher.
func (r *Recorder) Publish(ctx context.Context, batch []herald.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	defer r.notify()
	if err := ctx.Err(); err != nil {
		err = fmt.Errorf("heraldtest: Recorder: %w", err)
		r.recordAll(batch, err)
		return err
	}
	for _, f := range r.failures {
		if f.WholeBatch && f.active() && slices.ContainsFunc(batch, f.matches) {
			f.spend()
			r.recordAll(batch, f.Err)
			return f.Err
		}
	}

	errs := make([]error, len(batch))
	failed := false
	var failedKeys map[[2]string]string // topic and key -> id of the failed event
	for i, env := range batch {
		k := [2]string{env.Topic, env.Key}
		if first, ok := failedKeys[k]; ok && env.Key != "" {
			errs[i] = fmt.Errorf("heraldtest: event %s not published after event %s of its key failed: %w",
				env.ID, first, herald.ErrHeldBack)
		} else if err := r.failureFor(env); err != nil {
			errs[i], failed = err, true
			if env.Key != "" {
				if failedKeys == nil {
					failedKeys = map[[2]string]string{}
				}
				failedKeys[k] = env.ID
			}
		} else {
			r.published++
		}
		r.results = append(r.results, Result{Envelope: clone(env), Err: errs[i]})
	}
	if failed {
		return &herald.BatchError{Errs: errs}
	}
	return nil
}

// failureFor returns the error of the first Failure that fails env, and
// counts it, or nil.
func (r *Recorder) failureFor(env herald.Envelope) error {
	for _, f := range r.failures {
		if !f.WholeBatch && f.active() && f.matches(env) {
			f.spend()
			return f.Err
		}
	}
	return nil
}

func (f *failure) active() bool { return f.Times <= 0 || f.left > 0 }

func (f *failure) spend() {
	if f.Times > 0 {
		f.left--
	}
}

func (f *failure) matches(env herald.Envelope) bool { return f.Match == nil || f.Match(env) }

func (r *Recorder) recordAll(batch []herald.Envelope, err error) {
	for _, env := range batch {
		r.results = append(r.results, Result{Envelope: clone(env), Err: err})
	}
}

// notify wakes the waiters; r.mu is held.
func (r *Recorder) notify() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// clone copies an envelope's payload and headers, so that what the
// Recorder keeps cannot change after Publish returns.
func clone(env herald.Envelope) herald.Envelope {
	env.Payload = slices.Clone(env.Payload)
	env.Headers = maps.Clone(env.Headers)
	return env
}

// Published returns the envelopes confirmed so far, in the order they were
// published. An event published twice (after a lost acknowledgement, a
// lease that expired) appears twice.
func (r *Recorder) Published() []herald.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return published(r.results)
}

func published(results []Result) []herald.Envelope {
	var out []herald.Envelope
	for _, res := range results {
		if res.Err == nil {
			out = append(out, res.Envelope)
		}
	}
	return out
}

// Results returns what became of every envelope handed to the Recorder so
// far, confirmed or failed, in the order they came.
func (r *Recorder) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.results)
}

// WaitUntil returns nil once cond holds for the Results so far, or the
// context's error when it ends first. cond is called again after each
// Publish, not concurrently with itself.
func (r *Recorder) WaitUntil(ctx context.Context, cond func(results []Result) bool) error {
	for {
		r.mu.Lock()
		results := slices.Clone(r.results)
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		if cond(results) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// WaitPublished returns the published envelopes once at least n were
// published (duplicates count), or an error saying how many were when ctx
// ends first.
func (r *Recorder) WaitPublished(ctx context.Context, n int) ([]herald.Envelope, error) {
	var got []herald.Envelope
	err := r.WaitUntil(ctx, func(results []Result) bool {
		got = published(results)
		return len(got) >= n
	})
	if err != nil {
		return got, fmt.Errorf("heraldtest: %d of %d events published: %w", len(got), n, err)
	}
	return got, nil
}

// RequirePublished fails the test unless the Recorder published exactly
// the events want describes, as RequireWrittenTx checks rows: each
// expected event matches a published envelope of its own, and every
// published envelope whose topic and key agree with an expected event's is
// accounted for (a duplicate fails). Order does not matter. It returns the
// matched envelopes in the order of want. It does not wait: call
// WaitPublished first when a relay is still running.
func (r *Recorder) RequirePublished(t TB, want ...Event) []herald.Envelope {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("heraldtest: RequirePublished needs at least one expected Event; to check that nothing was published, use RequireNotPublished")
		return nil
	}
	xs, err := compileAll(want)
	if err != nil {
		t.Fatalf("heraldtest: %v", err)
		return nil
	}
	got := r.Published()
	matched, report := match("the Recorder's published events", xs, got, nil)
	if report != "" {
		t.Fatalf("%s", report)
		return nil
	}
	out := make([]herald.Envelope, len(matched))
	for i, j := range matched {
		out[i] = got[j]
	}
	return out
}

// RequireNotPublished fails the test if the Recorder published an envelope
// that matches one of match; with no match, if it published anything.
func (r *Recorder) RequireNotPublished(t TB, match ...Event) {
	t.Helper()
	if len(match) == 0 {
		match = []Event{{}}
	}
	xs, err := compileAll(match)
	if err != nil {
		t.Fatalf("heraldtest: %v", err)
		return
	}
	if report := forbidden("the Recorder's published events", xs, r.Published()); report != "" {
		t.Fatalf("%s", report)
	}
}
