package heraldnats_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

func TestCheckTargetFindsTheStreamCapturingATopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.createStream(t, "ORDERS", "prod.orders.>")
	b.createStream(t, "PAID", "prod.payments.paid")
	p := b.publisher(t, &heraldnats.Config{SubjectPrefix: "prod"})
	var checker heraldspec.TargetChecker = p

	for _, tc := range []struct {
		topic    string
		severity heraldspec.Severity
		message  string
	}{
		{"orders.created", heraldspec.SeverityOK, "JetStream stream ORDERS captures subject prod.orders.created"},
		{"orders.*", heraldspec.SeverityOK, "JetStream stream ORDERS captures subject prod.orders.*"},
		{"orders.>", heraldspec.SeverityOK, "JetStream stream ORDERS captures subject prod.orders.>"},
		{"orders", heraldspec.SeverityError, "no JetStream stream captures subject prod.orders: its events are retried until one does"},
		{"payments.*", heraldspec.SeverityWarning, "JetStream stream PAID captures only part of subject prod.payments.*"},
		{"refunds.issued", heraldspec.SeverityError, "no JetStream stream captures subject prod.refunds.issued"},
		{"", heraldspec.SeverityOK, "not checked: each subject needs a JetStream stream"},
	} {
		f, err := checker.CheckTarget(ctx, tc.topic)
		require.NoError(t, err)
		require.Equal(t, tc.severity, f.Severity, "%s: %v", tc.topic, f)
		require.Contains(t, f.Message, tc.message, tc.topic)
		if tc.severity != heraldspec.SeverityOK {
			require.Contains(t, f.Fix, "nats stream add NAME --subjects prod."+tc.topic)
		} else {
			require.Empty(t, f.Fix)
		}
	}

	// The fix it names is the fix; and nothing was created meanwhile.
	names := b.js.StreamNames(ctx)
	var n int
	for range names.Name() {
		n++
	}
	require.NoError(t, names.Err())
	require.Equal(t, 2, n, "CheckTarget creates no stream")
	b.createStream(t, "REFUNDS", "prod.refunds.issued")
	f, err := checker.CheckTarget(ctx, "refunds.issued")
	require.NoError(t, err)
	require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
}
