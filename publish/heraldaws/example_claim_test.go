package heraldaws_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/publish/heraldaws"
)

// The relay's side of a claim check: an SQS destination whose events above
// 256 KiB go to the bucket "herald-claims" first, and the lifecycle rule
// that deletes them after 14 days. For an S3-compatible store, give the
// client its endpoint and path-style addressing. It needs AWS, so it is
// compiled, not run.
func Example_claimCheck() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		log.Fatal(err)
	}
	s3Client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		// o.BaseEndpoint = aws.String("http://minio.internal:9000")
		o.UsePathStyle = true
	})
	store, err := heraldaws.NewS3Store(s3Client, "herald-claims")
	if err != nil {
		log.Fatal(err)
	}
	if err := heraldaws.PutClaimLifecycle(ctx, s3Client, "herald-claims", heraldclaim.DefaultPrefix, 14); err != nil {
		log.Fatal(err)
	}
	sqsPub, err := heraldaws.NewSQS(sqs.NewFromConfig(awsCfg), &heraldaws.SQSConfig{
		QueueURL: heraldaws.Fixed("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"),
	})
	if err != nil {
		log.Fatal(err)
	}
	pub, err := heraldclaim.Wrap(sqsPub, store, &heraldclaim.Options{
		Threshold: heraldaws.DefaultMaxMessageBytes,
		Size:      heraldaws.MessageSize(nil), // base64 included
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = herald.RelayConfig{Publisher: pub} // and Store, as in Example
}

// The consumer's side: Parse, then Resolve, which fetches the payload of
// an event that carries a claim check and checks its size and SHA-256.
func Example_claimCheckConsumer() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := heraldaws.NewS3Store(s3.NewFromConfig(awsCfg), "herald-claims")
	if err != nil {
		log.Fatal(err)
	}
	out, err := sqs.NewFromConfig(awsCfg).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:              aws.String("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"),
		MessageAttributeNames: []string{"All"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, msg := range out.Messages {
		m, err := heraldaws.Parse(msg)
		if err != nil {
			log.Fatal(err)
		}
		m, err = heraldclaim.Resolve(ctx, store, m)
		if err != nil {
			log.Fatal(err) // a *heraldclaim.MismatchError: the object is not the payload
		}
		log.Printf("event %s: %d bytes", m.ID, len(m.Payload))
	}
}
