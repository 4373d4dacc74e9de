package herald_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

func TestRetryPolicyBackoff(t *testing.T) {
	t.Parallel()
	p := herald.RetryPolicy{Base: 100 * time.Millisecond, Cap: time.Second, MaxAttempts: 5, MaxAge: time.Hour}
	for attempt := 1; attempt <= 10; attempt++ {
		nominal := min(100*time.Millisecond<<(attempt-1), time.Second)
		for range 200 {
			d := p.Backoff(attempt)
			require.GreaterOrEqual(t, d, nominal/2, "attempt %d", attempt)
			require.LessOrEqual(t, d, nominal, "attempt %d", attempt)
		}
	}
	// Jitter: delays for the same attempt are not all equal.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[p.Backoff(3)] = true
	}
	require.Greater(t, len(seen), 10)
}

func TestScrub(t *testing.T) {
	t.Parallel()
	for in, secret := range map[string]string{
		"dial nats://alice:s3cret@10.0.0.1:4222: refused":     "s3cret",
		"connect postgres://bob:hunter2@db/x failed":          "hunter2",
		"auth failed: password=opensesame user=x":             "opensesame",
		`{"token": "tok-123"}`:                                "tok-123",
		"Authorization: Bearer-abc (Authorization=zz9) oops.": "zz9",
	} {
		out := herald.Scrub(in)
		require.NotContains(t, out, secret, "scrubbing %q", in)
	}
	require.Equal(t, "plain error", herald.Scrub("plain error"))
	require.Len(t, herald.Scrub(string(make([]byte, 10000))), 0, "NUL bytes are dropped")
	require.LessOrEqual(t, len(herald.Scrub(strings.Repeat("é", 5000))), herald.MaxLastErrorLen)
}
