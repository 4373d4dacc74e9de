package herald_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// roundsBroker is a broker for SendInRounds: it records what each round
// sent and refuses the ids in refuse.
type roundsBroker struct {
	refuse    map[string]bool
	rounds    [][]string
	delivered []string
}

func (b *roundsBroker) send(batch []herald.Envelope) herald.RoundFunc {
	return func(_ context.Context, round []int, errs []error) error {
		var ids []string
		for _, i := range round {
			id := batch[i].ID
			ids = append(ids, id)
			if b.refuse[id] {
				errs[i] = errors.New("refused")
				continue
			}
			errs[i] = nil
			b.delivered = append(b.delivered, id)
		}
		b.rounds = append(b.rounds, ids)
		return nil
	}
}

func ordered(id, key string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: id, Topic: "t", Key: key}, Ordered: key != ""}
}

func TestSendInRounds(t *testing.T) {
	t.Parallel()

	t.Run("OneEventOfEachKeyPerRoundAndUnorderedEventsAtOnce", func(t *testing.T) {
		t.Parallel()
		batch := []herald.Envelope{ordered("a1", "a"), ordered("b1", "b"), ordered("a2", "a"), ordered("n1", ""),
			ordered("a3", "a"), ordered("n2", "")}
		b := &roundsBroker{}
		errs := herald.SendInRounds(t.Context(), batch, 1, b.send(batch))
		require.NoError(t, herald.BatchResult(errs))
		require.Equal(t, [][]string{{"a1", "b1", "n1", "n2"}, {"a2"}, {"a3"}}, b.rounds)
	})

	t.Run("AFailureHoldsBackTheRestOfItsKeyUnsent", func(t *testing.T) {
		t.Parallel()
		batch := []herald.Envelope{ordered("a1", "a"), ordered("b1", "b"), ordered("a2", "a"), ordered("b2", "b"),
			ordered("a3", "a")}
		b := &roundsBroker{refuse: map[string]bool{"a2": true}}
		errs := herald.SendInRounds(t.Context(), batch, 1, b.send(batch))
		require.Equal(t, []string{"a1", "b1", "b2"}, b.delivered, "a3 never reaches the broker")
		require.NoError(t, errs[0])
		require.EqualError(t, errs[2], "refused")
		require.ErrorIs(t, errs[4], herald.ErrHeldBack)
		require.Contains(t, errs[4].Error(), "a2", "the held-back event names the one it waits for")
		var be *herald.BatchError
		require.ErrorAs(t, herald.BatchResult(errs), &be)
	})

	t.Run("PerKeySendsSeveralEventsOfAKeyPerRound", func(t *testing.T) {
		t.Parallel()
		batch := []herald.Envelope{ordered("a1", "a"), ordered("a2", "a"), ordered("a3", "a"), ordered("b1", "b")}
		b := &roundsBroker{}
		herald.SendInRounds(t.Context(), batch, 2, b.send(batch))
		require.Equal(t, [][]string{{"a1", "a2", "b1"}, {"a3"}}, b.rounds)
	})

	t.Run("AStoppedPublisherFailsWhatWasNotAnswered", func(t *testing.T) {
		t.Parallel()
		batch := []herald.Envelope{ordered("a1", "a"), ordered("b1", "b"), ordered("a2", "a")}
		gone := errors.New("channel closed")
		errs := herald.SendInRounds(t.Context(), batch, 1, func(_ context.Context, round []int, errs []error) error {
			errs[round[0]] = nil // a1 confirmed before the channel closed
			return gone
		})
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], gone, "b1 was sent but never answered")
		require.ErrorIs(t, errs[2], gone, "a2 was never sent")
	})

	t.Run("ACancelledContextSendsNothingMore", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		batch := []herald.Envelope{ordered("a1", "a"), ordered("a2", "a")}
		errs := herald.SendInRounds(ctx, batch, 1, func(_ context.Context, round []int, errs []error) error {
			errs[round[0]] = nil
			cancel()
			return nil
		})
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], context.Canceled)
	})

	t.Run("AnEventTheSenderForgetsIsNotConfirmed", func(t *testing.T) {
		t.Parallel()
		batch := []herald.Envelope{ordered("a1", "a"), ordered("a2", "a"), ordered("b1", "b")}
		errs := herald.SendInRounds(t.Context(), batch, 1, func(context.Context, []int, []error) error { return nil })
		require.ErrorIs(t, errs[0], herald.ErrNoAnswer)
		require.ErrorIs(t, errs[1], herald.ErrHeldBack, "a forgotten event holds back its key like a failed one")
		require.ErrorIs(t, errs[2], herald.ErrNoAnswer)
	})

	t.Run("AHotKeyOfAThousandEventsKeepsItsOrder", func(t *testing.T) {
		t.Parallel()
		var batch []herald.Envelope
		for i := range 1000 {
			batch = append(batch, ordered(fmt.Sprintf("h%04d", i), "hot"))
		}
		b := &roundsBroker{}
		require.NoError(t, herald.BatchResult(herald.SendInRounds(t.Context(), batch, 1, b.send(batch))))
		require.Len(t, b.rounds, 1000)
		require.IsNonDecreasing(t, b.delivered)
	})
}

func TestEventHeaders(t *testing.T) {
	t.Parallel()
	env := herald.Envelope{Message: herald.Message{
		ID: "0192c0de-0000-7000-8000-000000000001", Topic: "orders", Key: "42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 17,
		Headers: map[string]string{
			"traceparent": "00-abc-def-01", "Herald-Id": "forged", "Nats-Msg-Id": "forged", "CC": "other.queue",
			"Connection": "close", "Herald-Event-Version": "9",
		},
	}}
	got := map[string]string{}
	herald.EventHeaders(&env, func(name, value string) {
		require.NotContains(t, got, name, "each name once")
		got[name] = value
	})
	require.Equal(t, map[string]string{
		"traceparent":                 "00-abc-def-01",
		herald.HeaderID:               env.ID,
		herald.HeaderTopic:            "orders",
		herald.HeaderType:             "order.placed",
		herald.HeaderKey:              "42",
		herald.HeaderAggregateType:    "order",
		herald.HeaderAggregateID:      "42",
		herald.HeaderEventVersion:     "3",
		herald.HeaderAggregateVersion: "17",
	}, got, "reserved producer headers are dropped; Herald's come from the event")

	empty := herald.Envelope{Message: herald.Message{ID: "x", Topic: "t"}}
	got = map[string]string{}
	var names []string
	herald.EventHeaders(&empty, func(name, v string) { names = append(names, name); got[name] = v })
	require.Equal(t, []string{herald.HeaderID, herald.HeaderTopic, herald.HeaderEventVersion}, names,
		"empty fields are left out, the event version never: "+strings.Join(names, ","))
	require.Equal(t, "1", got[herald.HeaderEventVersion], "an envelope without a version is version 1")
}

// The manual's table of the headers on the broker (docs/sql-contract.md)
// lists every header EventHeaders sends, and no Herald-* header it does
// not send.
func TestHeadersTableListsWhatEventHeadersSends(t *testing.T) {
	t.Parallel()
	documented := docsHeadersTable(t, "docs/sql-contract.md", "## Headers on the broker")
	env := herald.Envelope{Message: herald.Message{
		ID: "0192c0de-0000-7000-8000-000000000001", Topic: "orders", Key: "42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 17,
		Headers: map[string]string{herald.HeaderBackfill: "orders-2026"}, // as a backfill writes it
	}}
	sent := map[string]bool{}
	herald.EventHeaders(&env, func(name, _ string) { sent[name] = true })
	for name := range sent {
		require.Contains(t, documented, name, "EventHeaders sends %s; the table in docs/sql-contract.md omits it", name)
	}
	for _, name := range documented {
		if strings.HasPrefix(name, "Herald-") {
			require.Contains(t, sent, name, "docs/sql-contract.md lists %s; EventHeaders does not send it", name)
		}
	}
}

// docsHeadersTable returns the header names in the first column of the table
// under heading in file: each name in backquotes.
func docsHeadersTable(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(file))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	require.True(t, ok, "%s has no heading %q", file, heading)
	backquoted := regexp.MustCompile("`([^`]+)`")
	var names []string
	for line := range strings.Lines(section) {
		if strings.HasPrefix(line, "## ") {
			break
		}
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range backquoted.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, m[1])
		}
	}
	require.NotEmpty(t, names, "no table of headers under %q in %s", heading, file)
	return names
}

func TestParseVersions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		event, aggregate string
		wantEvent        int
		wantAggregate    int64
		wantErr          string
	}{
		{"", "", 1, 0, ""},
		{"1", "", 1, 0, ""},
		{"7", "12", 7, 12, ""},
		{"2147483647", "9223372036854775807", 2147483647, 9223372036854775807, ""},
		{"0", "", 0, 0, "Herald-Event-Version"},
		{"-1", "", 0, 0, "Herald-Event-Version"},
		{"+2", "", 0, 0, "Herald-Event-Version"},
		{"2147483648", "", 0, 0, "Herald-Event-Version"},
		{"v2", "", 0, 0, "Herald-Event-Version"},
		{"1", "0", 0, 0, "Herald-Aggregate-Version"},
		{"1", "-5", 0, 0, "Herald-Aggregate-Version"},
		{"1", "9223372036854775808", 0, 0, "Herald-Aggregate-Version"},
		{"1", " 3", 0, 0, "Herald-Aggregate-Version"},
		{"1", strings.Repeat("9", 500), 0, 0, "Herald-Aggregate-Version"},
	} {
		ev, av, err := herald.ParseVersions(c.event, c.aggregate)
		if c.wantErr != "" {
			require.ErrorContains(t, err, c.wantErr, "%q %q", c.event, c.aggregate)
			require.Less(t, len(err.Error()), 200, "a long value is cut short in the error")
			continue
		}
		require.NoError(t, err, "%q %q", c.event, c.aggregate)
		require.Equal(t, c.wantEvent, ev)
		require.Equal(t, c.wantAggregate, av)
	}
}

// SendInRounds keeps each key's unsent events in a list so that a round
// costs what it sends; referenceRounds is the rule written plainly, every
// round walking the whole batch. On random batches (keys, unordered
// events, refusals, forgotten events, perKey 1 to 3) both send the same
// rounds and give the same errors.
func TestSendInRoundsSendsWhatThePlainRuleSends(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	for run := range 3000 {
		n := rng.IntN(40)
		batch := make([]herald.Envelope, n)
		for i := range batch {
			key := ""
			if rng.IntN(5) > 0 {
				key = string(rune('a' + rng.IntN(1+rng.IntN(6))))
			}
			batch[i] = herald.Envelope{Message: herald.Message{ID: fmt.Sprint(i), Topic: "t", Key: key}, Ordered: rng.IntN(8) > 0}
		}
		answer := make([]int, n) // 0 confirmed, 1 refused, 2 forgotten
		for i := range answer {
			if rng.IntN(6) == 0 {
				answer[i] = 1 + rng.IntN(2)
			}
		}
		perKey := 1 + rng.IntN(3)
		sender := func(rounds *[][]int) herald.RoundFunc {
			return func(_ context.Context, round []int, errs []error) error {
				*rounds = append(*rounds, slices.Clone(round))
				for _, i := range round {
					switch answer[i] {
					case 0:
						errs[i] = nil
					case 1:
						errs[i] = errors.New("refused")
					}
				}
				return nil
			}
		}
		var got, want [][]int
		gotErrs := herald.SendInRounds(t.Context(), batch, perKey, sender(&got))
		wantErrs := referenceRounds(t.Context(), batch, perKey, sender(&want))
		require.Equal(t, want, got, "run %d: rounds", run)
		require.Equal(t, fmt.Sprint(wantErrs), fmt.Sprint(gotErrs), "run %d: errors", run)
	}
}

// referenceRounds is SendInRounds as it was first written.
func referenceRounds(ctx context.Context, batch []herald.Envelope, perKey int, send herald.RoundFunc) []error {
	perKey = max(perKey, 1)
	errs := make([]error, len(batch))
	sent := make([]bool, len(batch))
	closed := map[herald.TopicKey]string{} // ordered key -> id of its failed event
	round := make([]int, 0, len(batch))
	taken := map[herald.TopicKey]int{}
	for first := true; ; first = false {
		round = round[:0]
		clear(taken)
		for i := range batch {
			env := &batch[i]
			k, ordered := refOrderKey(env)
			switch {
			case sent[i]:
			case !ordered && !first:
				// Unordered events all went in the first round.
			case ordered && closed[k] != "":
				errs[i], sent[i] = fmt.Errorf("herald: event %s not sent after event %s of its key failed: %w",
					env.ID, closed[k], herald.ErrHeldBack), true
			case ordered && taken[k] >= perKey:
			default:
				if ordered {
					taken[k]++
				}
				round = append(round, i)
			}
		}
		if len(round) == 0 {
			return errs
		}
		if err := ctx.Err(); err != nil {
			return refNotSent(errs, sent, fmt.Errorf("herald: not sent: %w", context.Cause(ctx)))
		}
		for _, i := range round {
			errs[i], sent[i] = herald.ErrNoAnswer, true
		}
		stop := send(ctx, round, errs)
		if stop != nil {
			for _, i := range round {
				if errors.Is(errs[i], herald.ErrNoAnswer) {
					errs[i] = stop
				}
			}
			return refNotSent(errs, sent, stop)
		}
		for _, i := range round {
			if k, ordered := refOrderKey(&batch[i]); ordered && errs[i] != nil && closed[k] == "" {
				closed[k] = batch[i].ID
			}
		}
	}
}

func refOrderKey(env *herald.Envelope) (herald.TopicKey, bool) {
	if !env.Ordered || env.Key == "" {
		return herald.TopicKey{}, false
	}
	return herald.TopicKey{Topic: env.Topic, Key: env.Key}, true
}

func refNotSent(errs []error, sent []bool, err error) []error {
	for i := range errs {
		if !sent[i] {
			errs[i] = err
		}
	}
	return errs
}

// BenchmarkSendInRounds is the rule's own cost for a batch of 1,000
// ordered events on 10, 100 and 1,000 keys (100, 10 and 1 rounds), with a
// broker that confirms at once.
func BenchmarkSendInRounds(b *testing.B) {
	for _, keys := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			batch := make([]herald.Envelope, 1000)
			for i := range batch {
				batch[i] = ordered(fmt.Sprint(i), fmt.Sprintf("customer-%d", i%keys))
			}
			b.ReportAllocs()
			for b.Loop() {
				herald.SendInRounds(context.Background(), batch, 1, func(_ context.Context, round []int, errs []error) error {
					for _, i := range round {
						errs[i] = nil
					}
					return nil
				})
			}
		})
	}
}
