package heraldaws

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/heraldclaim"
)

// S3Store is a bucket of Amazon S3, or of an S3-compatible store, as the
// heraldclaim.ObjectStore of a claim check. For a store other than AWS,
// give the client its endpoint (BaseEndpoint) and, usually, path-style
// addressing (s3.Options.UsePathStyle).
type S3Store struct {
	client *s3.Client
	bucket string
}

var _ heraldclaim.ObjectStore = (*S3Store)(nil)

// NewS3Store returns the bucket of client as an object store. The bucket
// must exist; see PutClaimLifecycle for the rule that deletes the objects.
func NewS3Store(client *s3.Client, bucket string) (*S3Store, error) {
	if client == nil {
		return nil, errors.New("heraldaws: NewS3Store needs a client")
	}
	if bucket == "" {
		return nil, errors.New("heraldaws: NewS3Store needs a bucket name")
	}
	return &S3Store{client: client, bucket: bucket}, nil
}

// Bucket returns the bucket name.
func (s *S3Store) Bucket() string { return s.bucket }

// Put writes body under key, in one PutObject request, replacing an
// object already there.
func (s *S3Store) Put(ctx context.Context, key string, body []byte, contentType string) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String(contentType),
	})
	if err != nil {
		return fmt.Errorf("heraldaws: putting s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// Get opens the object under key. An error wraps heraldclaim.ErrNotFound
// when there is none.
func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	var nsk *s3types.NoSuchKey
	if errors.As(err, &nsk) {
		return nil, fmt.Errorf("heraldaws: getting s3://%s/%s: %w", s.bucket, key, heraldclaim.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("heraldaws: getting s3://%s/%s: %w", s.bucket, key, err)
	}
	return out.Body, nil
}

// Delete removes the object under key; removing one that is not there is
// not an error.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("heraldaws: deleting s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// MessageSize returns, for heraldclaim.Options.Size, the function that
// measures an event's SQS or SNS message as AWS counts it against its
// limit: the body (the payload, in base64 when it is not text SQS takes,
// or the CloudEvent when ce is set) and every attribute. ce is the
// publisher's CloudEvents setting.
func MessageSize(ce *heraldce.Config) func(env *herald.Envelope) int {
	return func(env *herald.Envelope) int {
		m, err := buildMessage(env, 0, "size", math.MaxInt, ce)
		if err != nil {
			// The publisher reports what is wrong with the event.
			return heraldclaim.Size(env)
		}
		return m.size
	}
}

// ClaimLifecycleRuleID is the id of the rule PutClaimLifecycle writes.
const ClaimLifecycleRuleID = "herald-claim-checks"

// PutClaimLifecycle sets the bucket's lifecycle configuration to one rule,
// ClaimLifecycleRuleID, that expires the objects under prefix days after
// they were written. Choose days at least the outbox's retention plus the
// longest time a consumer may still receive the event. It replaces the
// bucket's whole lifecycle configuration: a bucket with rules of its own
// gets this rule added by hand instead (see docs/claim-checks.md).
func PutClaimLifecycle(ctx context.Context, client *s3.Client, bucket, prefix string, days int32) error {
	if days < 1 {
		return fmt.Errorf("heraldaws: claim-check lifecycle of %d days, want 1 or more", days)
	}
	if prefix == "" || strings.HasPrefix(prefix, "/") {
		return fmt.Errorf("heraldaws: claim-check lifecycle prefix %q: want the claim checks' prefix, not empty and without a leading slash", prefix)
	}
	_, err := client.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{
		Bucket: aws.String(bucket),
		LifecycleConfiguration: &s3types.BucketLifecycleConfiguration{Rules: []s3types.LifecycleRule{{
			ID:         aws.String(ClaimLifecycleRuleID),
			Status:     s3types.ExpirationStatusEnabled,
			Filter:     &s3types.LifecycleRuleFilter{Prefix: aws.String(prefix)},
			Expiration: &s3types.LifecycleExpiration{Days: aws.Int32(days)},
		}}},
	})
	if err != nil {
		return fmt.Errorf("heraldaws: setting the lifecycle of bucket %s: %w", bucket, err)
	}
	return nil
}
