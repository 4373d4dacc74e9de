package heraldaws_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldaws"
)

func TestCheckTargetFindsTheQueueOrTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	t.Run("SQS", func(t *testing.T) {
		url := b.queue(t, "doctor-orders", nil)
		var checker heraldspec.TargetChecker = b.sqsPublisher(t, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(url)})
		for _, topic := range []string{"orders", "orders.*", ""} {
			f, err := checker.CheckTarget(ctx, topic)
			require.NoError(t, err)
			require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
			require.Equal(t, "SQS queue "+url+" exists", f.Message)
		}
		_, err := b.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
		require.NoError(t, err)
		f, err := checker.CheckTarget(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityError, f.Severity, f)
		require.Equal(t, "SQS queue "+url+" does not exist: its events fail until it does", f.Message)
		require.Contains(t, f.Fix, "aws sqs create-queue --queue-name doctor-orders ")

		// A queue per topic: a pattern names none.
		perTopic := b.sqsPublisher(t, &heraldaws.SQSConfig{QueueURL: func(env *herald.Envelope) string { return url + "-" + env.Topic }})
		f, err = perTopic.CheckTarget(ctx, "orders.*")
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityOK, f.Severity)
		require.Contains(t, f.Message, "not checked")
	})

	t.Run("SNS", func(t *testing.T) {
		arn, _ := b.topic(t, "doctor-events", false)
		var checker heraldspec.TargetChecker = b.snsPublisher(t, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed(arn)})
		f, err := checker.CheckTarget(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
		require.Equal(t, "SNS topic "+arn+" exists", f.Message)
		_, err = b.sns.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: aws.String(arn)})
		require.NoError(t, err)
		f, err = checker.CheckTarget(ctx, "")
		require.NoError(t, err)
		require.Equal(t, heraldspec.SeverityError, f.Severity, f)
		require.Equal(t, "SNS topic "+arn+" does not exist: its events fail until it does", f.Message)
		require.Contains(t, f.Fix, "aws sns create-topic --name doctor-events")
	})
}
