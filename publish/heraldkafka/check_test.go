package heraldkafka_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

func TestCheckTargetAsksForTheTopicWithoutCreatingIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var checker heraldspec.TargetChecker = b.publisher(t, &heraldkafka.Config{TopicPrefix: "prod."})

	f, err := checker.CheckTarget(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
	require.Equal(t, "Kafka topic prod.orders exists (1 partitions)", f.Message)

	f, err = checker.CheckTarget(ctx, "refunds")
	require.NoError(t, err)
	require.Equal(t, heraldspec.SeverityError, f.Severity, f)
	require.Contains(t, f.Message, "Kafka topic prod.refunds does not exist")
	require.Contains(t, f.Fix, "kafka-topics.sh --create --topic prod.refunds")

	for _, topic := range []string{"orders.*", "orders.>", ""} {
		f, err = checker.CheckTarget(ctx, topic)
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
		require.Contains(t, f.Message, "not checked", topic)
	}

	// Asking created nothing, even on brokers that create topics on
	// first use.
	auto := setup(t, kfake.AllowAutoTopicCreation())
	cl := auto.client(t, kgo.AllowAutoTopicCreation())
	p, err := heraldkafka.New(cl, nil)
	require.NoError(t, err)
	f, err = p.CheckTarget(ctx, "refunds")
	require.NoError(t, err)
	require.Equal(t, heraldspec.SeverityError, f.Severity, f)
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl) // every topic
	require.NoError(t, err)
	var names []string
	for _, t := range resp.Topics {
		names = append(names, *t.Topic)
	}
	require.ElementsMatch(t, []string{"orders", "prod.orders", "users"}, names, "CheckTarget created no topic")
}
