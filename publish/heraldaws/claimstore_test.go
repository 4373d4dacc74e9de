package heraldaws_test

import (
	"context"
	"net"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldwebhook"
)

// claim_check=s3://... on a destination of another broker opens its bucket
// through this package: a bucket that does not exist is a configuration
// error, an S3 that does not answer an outage to wait out, and an existing
// bucket opens.
func TestClaimCheckOnAnotherDestinationOpensItsBucket(t *testing.T) {
	t.Parallel()
	_, endpoint := motoBundle(t)
	ctx := context.Background()
	getenv := awsEnv("aws-Secret-0042")
	open := func(bucket, s3At string) error {
		pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{Name: "orders", Getenv: getenv,
			Secrets: heraldspec.EnvSecrets("HERALD_WEBHOOK_", func(name string) (string, bool) {
				return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", name == "HERALD_WEBHOOK_SECRET"
			}),
			URL: "https://hooks.example.com/herald?claim_check=s3://" + bucket + "/events&claim_region=eu-west-1&claim_endpoint=" + s3At})
		if err == nil {
			require.NotNil(t, pub)
			closePub()
		}
		return err
	}

	err := open("no-such-bucket", endpoint)
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.False(t, oe.Unreachable, "a missing bucket is the configuration's fault: %v", err)
	require.ErrorContains(t, err, "claim_check bucket no-such-bucket does not exist")
	require.NotContains(t, err.Error(), "aws-Secret-0042")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	err = open("claims", closed)
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable, "an S3 that does not answer is waited for: %v", err)

	_, err = newS3(awsConfig(t, endpoint)).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("other-claims"),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraintEuWest1}})
	require.NoError(t, err)
	require.NoError(t, open("other-claims", endpoint))
}
