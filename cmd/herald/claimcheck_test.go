package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// An sqs:// destination with claim_check= sends an event above the
// queue's limit through the bucket, and the consumer resolves it.
func TestRelayPublishesALargeEventToSQSThroughAClaimCheck(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	d := setup(t)
	moto := testenv.Moto(t)
	const secret = "aws-Secret-Key-0123456789"
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	cfg := aws.Config{
		Region: "eu-west-1", BaseEndpoint: aws.String(moto.URL), HTTPClient: &http.Client{Transport: transport},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", secret, ""),
	}
	sq := sqs.NewFromConfig(cfg)
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
	ctx := t.Context()
	queue := "large-" + d.schema
	q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(queue)})
	require.NoError(t, err)
	bucket := strings.ReplaceAll("claims-"+d.schema, "_", "-")
	_, err = s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraintEuWest1}})
	require.NoError(t, err)

	const size = 300 << 10 // above SQS's 256 KiB
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, type, payload) VALUES
		('orders.placed', 'o1', 'OrderPlaced', convert_to(repeat('x', `+fmt.Sprint(size)+`), 'UTF8'))`)
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(rctx, map[string]string{"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": secret}, nil,
			append([]string{"relay",
				"--destination", "q=sqs://" + queue + "?region=eu-west-1&endpoint=" + moto.URL + "&claim_check=s3://" + bucket + "/events/",
				"--route", "orders.*=q"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 1
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout+r.stderr, secret)

	out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	ev, err := heraldaws.Parse(out.Messages[0])
	require.NoError(t, err)
	require.Equal(t, "events/"+ev.ID, ev.Headers[heraldclaim.HeaderKey])
	store, err := heraldaws.NewS3Store(s3c, bucket)
	require.NoError(t, err)
	ev, err = heraldclaim.Resolve(ctx, store, ev)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("x", size), string(ev.Payload))
}

// claim_check on a nats:// destination: an event above the server's
// max_payload (1 MiB, the default) goes through the bucket, with no
// threshold given; a small one travels as it is.
func TestRelayPublishesAnEventOverNATSsLimitThroughAClaimCheck(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	d := setup(t)
	moto := testenv.Moto(t)
	ns := testenv.NATS(t)
	stream := ns.CreateStream(t, "CLAIMS_"+strings.ToUpper(d.schema), d.schema+".>")
	const secret = "aws-Secret-Key-0123456789"
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	s3c := s3.NewFromConfig(aws.Config{
		Region: "eu-west-1", BaseEndpoint: aws.String(moto.URL), HTTPClient: &http.Client{Transport: transport},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", secret, ""),
	}, func(o *s3.Options) { o.UsePathStyle = true })
	ctx := t.Context()
	bucket := strings.ReplaceAll("nats-claims-"+d.schema, "_", "-")
	_, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraintEuWest1}})
	require.NoError(t, err)

	const size = 2 << 20 // over NATS's 1 MiB max_payload
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, type, payload) VALUES
		('`+d.schema+`.large', 'o1', 'OrderPlaced', convert_to(repeat('x', `+fmt.Sprint(size)+`), 'UTF8')),
		('`+d.schema+`.small', 'o1', 'OrderPlaced', convert_to('small', 'UTF8'))`)
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(rctx, map[string]string{"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": secret}, nil,
			append([]string{"relay",
				"--destination", "ev=" + ns.URL() + "?claim_check=s3://" + bucket + "/events&claim_endpoint=" + moto.URL + "&claim_region=eu-west-1",
				"--route", d.schema + ".>=ev"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 2
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout+r.stderr, secret)

	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	batch, err := cons.FetchNoWait(10)
	require.NoError(t, err)
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	require.NoError(t, batch.Error())
	require.Len(t, got, 2)
	store, err := heraldaws.NewS3Store(s3c, bucket)
	require.NoError(t, err)
	large, err := heraldnats.ParseJetStream(got[0])
	require.NoError(t, err)
	require.Less(t, len(got[0].Data()), 1<<10, "the large event's message carries the reference, not the payload")
	require.Equal(t, "events/"+large.ID, large.Headers[heraldclaim.HeaderKey])
	large, err = heraldclaim.Resolve(ctx, store, large)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("x", size), string(large.Payload))
	small, err := heraldnats.ParseJetStream(got[1])
	require.NoError(t, err)
	require.Equal(t, "small", string(small.Payload))
	require.Empty(t, small.Headers[heraldclaim.HeaderKey])
}
