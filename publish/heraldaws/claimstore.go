package heraldaws

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/heraldspec"
)

// openClaimStore opens the S3 bucket of a claim_check=s3://BUCKET/PREFIX
// on a destination of any broker (heraldspec.ClaimCheck): the AWS
// configuration is loaded as for an sqs:// destination, with claim_region
// as the URL's region, and the bucket must answer HeadBucket. A bucket
// that does not exist, or credentials it refuses, is the configuration's
// fault; an S3 that cannot be reached is an outage to wait out.
func openClaimStore(ctx context.Context, d *heraldspec.Destination, c *heraldspec.ClaimCheck) (heraldclaim.ObjectStore, func(), error) {
	u := &URLConfig{d: d, Region: c.Region}
	cfg, err := u.load(ctx, d.Log())
	if err != nil {
		return nil, nil, heraldspec.Refused(d, err, ": cannot load the AWS configuration for claim_check s3://%s: %s", c.Bucket, err)
	}
	client := claimClient(cfg, c.Endpoint)
	hctx, cancel := context.WithTimeout(ctx, d.Timeout())
	defer cancel()
	if _, err := client.HeadBucket(hctx, &s3.HeadBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		var missing *s3types.NotFound
		if errors.As(err, &missing) {
			return nil, nil, heraldspec.Refused(d, err, ": claim_check bucket %s does not exist (create it, with the lifecycle rule of docs/claim-checks.md)", c.Bucket)
		}
		return nil, nil, u.failed(fmt.Sprintf("reach claim_check bucket %s", c.Bucket), err)
	}
	store, err := NewS3Store(client, c.Bucket)
	if err != nil {
		return nil, nil, heraldspec.Refused(d, err, ": %s", err)
	}
	return store, func() {}, nil
}
