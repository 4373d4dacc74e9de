package heraldpubsub_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
)

func TestCheckTargetAsksForTheTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(t, nil)
	f.topic(t, "prod.orders")
	var checker heraldspec.TargetChecker = f.publisher(t, &heraldpubsub.Config{TopicPrefix: "prod."})

	got, err := checker.CheckTarget(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, heraldspec.SeverityOK, got.Severity, got)
	require.Equal(t, "Pub/Sub topic "+topicName("prod.orders")+" exists", got.Message)

	got, err = checker.CheckTarget(ctx, "refunds")
	require.NoError(t, err)
	require.Equal(t, heraldspec.SeverityError, got.Severity, got)
	require.Equal(t, "Pub/Sub topic "+topicName("prod.refunds")+" does not exist: its events fail until it does", got.Message)
	require.Equal(t, "gcloud pubsub topics create prod.refunds --project "+project+", and subscribe its consumers", got.Fix)

	for _, topic := range []string{"orders.*", ""} {
		got, err = checker.CheckTarget(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityOK, got.Severity)
		require.Contains(t, got.Message, "not checked")
	}
	// Asking created nothing.
	got, err = checker.CheckTarget(ctx, "refunds")
	require.NoError(t, err)
	require.Equal(t, heraldspec.SeverityError, got.Severity)
}
