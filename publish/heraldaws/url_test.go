package heraldaws_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldaws"
)

// awsEnv is an environment with static credentials, as Getenv reads it.
func awsEnv(secret string) func(string) (string, bool) {
	env := map[string]string{"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": secret}
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

func TestURLsTheAWSPublishersTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		config    any
		check     func(t *testing.T, c *heraldaws.URLConfig)
	}{
		{"AQueueWithEveryOption", "sqs://orders.fifo?region=eu-west-1&account=123456789012&endpoint=http://127.0.0.1:4566&max_message_bytes=1048576", nil,
			func(t *testing.T, c *heraldaws.URLConfig) {
				require.Equal(t, "sqs", c.Kind)
				require.Equal(t, "orders.fifo", c.Name)
				require.Equal(t, "eu-west-1", c.Region)
				require.Equal(t, "123456789012", c.Account)
				require.Equal(t, "http://127.0.0.1:4566", c.Endpoint)
				require.Equal(t, 1<<20, c.SQS.MaxMessageBytes)
			}},
		{"AQueueURL", "sqs://sqs.eu-west-1.amazonaws.com/123456789012/orders", nil, func(t *testing.T, c *heraldaws.URLConfig) {
			require.Equal(t, "orders", c.Name)
			require.Equal(t, "eu-west-1", c.Region)
			require.Equal(t, "123456789012", c.Account)
		}},
		{"ATopicAndNothingElse", "sns://billing_events", nil, func(t *testing.T, c *heraldaws.URLConfig) {
			require.Equal(t, "sns", c.Kind)
			require.Equal(t, "billing_events", c.Name)
			require.Empty(t, c.Region, "the AWS configuration's")
			require.Empty(t, c.Account, "the caller's")
			require.Zero(t, c.SNS.MaxMessageBytes, "the publisher's default")
		}},
		{"AClaimCheck", "sqs://orders?claim_check=s3://herald-claims/events/&claim_threshold=1000&claim_endpoint=http://127.0.0.1:9000", nil,
			func(t *testing.T, c *heraldaws.URLConfig) {
				require.Equal(t, "herald-claims", c.ClaimBucket)
				require.Equal(t, "events/", c.ClaimPrefix)
				require.Equal(t, 1000, c.ClaimThreshold)
				require.Equal(t, "http://127.0.0.1:9000", c.ClaimEndpoint)
			}},
		{"AClaimCheckPrefixIsAFolder", "sqs://orders?claim_check=s3://herald-claims/a/b", nil, func(t *testing.T, c *heraldaws.URLConfig) {
			require.Equal(t, "a/b/", c.ClaimPrefix)
		}},
		{"AClaimCheckWithDefaults", "sns://billing?claim_check=s3://herald-claims", nil, func(t *testing.T, c *heraldaws.URLConfig) {
			require.Equal(t, "herald-claims", c.ClaimBucket)
			require.Empty(t, c.ClaimPrefix, "heraldclaim's default")
			require.Zero(t, c.ClaimThreshold, "the publisher's MaxMessageBytes")
		}},
		{"TheURLOverridesTheConfig", "sns://billing?region=us-gov-west-1&max_message_bytes=65536",
			&heraldaws.SNSConfig{MaxMessageBytes: 1000, MaxConcurrentRequests: 2}, func(t *testing.T, c *heraldaws.URLConfig) {
				require.Equal(t, 65536, c.SNS.MaxMessageBytes)
				require.Equal(t, 2, c.SNS.MaxConcurrentRequests)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := heraldspec.Parse(heraldspec.Destination{Name: "q", URL: tc.url, Config: tc.config})
			require.NoError(t, err)
			require.Equal(t, tc.url, p.Display())
			tc.check(t, p.Target().(*heraldaws.URLConfig))
		})
	}
}

func TestURLsTheAWSPublishersRefuse(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-Secret"
	for _, tc := range []struct {
		name, url string
		config    any
		ce        *heraldce.Config
		says      string
	}{
		{"UnknownOption", "sqs://orders?region=eu-west-1&visibility=30", nil, nil,
			`sqs option "visibility" is not supported: use region, account, endpoint, max_message_bytes, claim_check, claim_threshold or claim_endpoint`},
		{"ClaimCheckNotS3", "sqs://orders?claim_check=gs://b/p", nil, nil, `claim_check="gs://b/p" is not s3://BUCKET/PREFIX`},
		{"ClaimCheckBadBucket", "sqs://orders?claim_check=s3://B_ad/p", nil, nil, `claim_check: "B_ad" is not an S3 bucket name`},
		{"ClaimCheckWithCredentials", "sqs://orders?claim_check=s3://AKID:" + secret + "@bucket/p", nil, nil, "claim_check is not s3://BUCKET/PREFIX: it takes no credentials"},
		{"ClaimThresholdNotANumber", "sqs://orders?claim_check=s3://bucket&claim_threshold=0", nil, nil, `claim_threshold="0" is not a positive number of bytes`},
		{"ClaimThresholdAlone", "sqs://orders?claim_threshold=10", nil, nil, "claim_threshold and claim_endpoint need claim_check=s3://BUCKET/PREFIX"},
		{"ClaimEndpointNotHTTP", "sqs://orders?claim_check=s3://bucket&claim_endpoint=ftp://x", nil, nil, "claim_endpoint is not an http:// or https:// URL"},
		{"OptionTwice", "sqs://orders?region=eu-west-1&region=eu-west-2", nil, nil, `option "region" is given twice`},
		{"BadRegion", "sqs://orders?region=Europe", nil, nil, `region="Europe" is not an AWS region such as eu-west-1`},
		{"BadAccount", "sns://billing?account=42", nil, nil, `account="42" is not a 12-digit AWS account id`},
		{"BadQueueName", "sqs://orders.v2", nil, nil, `"orders.v2" is not an SQS queue name`},
		{"BadTopicName", "sns://bill.ing", nil, nil, `"bill.ing" is not an SNS topic name`},
		{"NotAQueueURL", "sqs://example.com/123456789012/orders", nil, nil,
			"an sqs:// URL is sqs://QUEUE?region=... or sqs://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE"},
		{"ATopicWithAPath", "sns://billing/x", nil, nil, "an sns:// URL is sns://TOPIC?region=...&account=...: no path"},
		{"SizeNotANumber", "sns://billing?max_message_bytes=x", nil, nil, `max_message_bytes="x" is not a number of bytes from 1 to 1048576`},
		{"SizeTooLarge", "sqs://orders?max_message_bytes=1048577", nil, nil, "is not a number of bytes from 1 to 1048576"},
		{"EndpointNotHTTP", "sqs://orders?endpoint=ftp://127.0.0.1", nil, nil, "endpoint is not an http:// or https:// URL without credentials"},
		{"EndpointWithCredentials", "sqs://orders?endpoint=http://u:" + secret + "@127.0.0.1:1", nil, nil,
			"endpoint is not an http:// or https:// URL without credentials"},
		{"CredentialsInTheURL", "sns://AKID:" + secret + "@billing", nil, nil, "an sns:// URL takes no credentials: they come from the AWS credential chain"},
		{"TheOtherKindsConfig", "sqs://orders", &heraldaws.SNSConfig{}, nil, "Destination.Config is a *heraldaws.SNSConfig, not a *heraldaws.SQSConfig"},
		{"AConfigTheQueueRefuses", "sqs://orders", &heraldaws.SQSConfig{MaxConcurrentRequests: -1}, nil,
			"SQSConfig.MaxConcurrentRequests must not be negative"},
		{"BinaryCloudEvents", "sns://billing", nil, &heraldce.Config{Source: "/s", Mode: heraldce.Binary},
			"SNSConfig.CloudEvents.Mode \"binary\": SQS and SNS take CloudEvents in structured mode only"},
		{"AQueueAndATopic", "sqs://orders,sns://billing", nil, nil, "one destination takes URLs of one broker; give another destination for sns"},
		{"TwoQueues", "sqs://a,sqs://b", nil, nil, "a sqs destination takes one URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := heraldspec.Parse(heraldspec.Destination{Name: "q", URL: tc.url, Config: tc.config, CloudEvents: tc.ce})
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), secret)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// motoBundle starts moto_server (env: its settings) and returns clients
// of it and its URL, for a destination's endpoint=.
func motoBundle(t *testing.T, env ...string) (*bundle, string) {
	t.Helper()
	moto := testenv.Moto(t, env...)
	cfg := awsConfig(t, moto.URL)
	return &bundle{sqs: sqs.NewFromConfig(cfg), sns: sns.NewFromConfig(cfg)}, moto.URL
}

// publishOne publishes one event through pub.
func publishOne(t *testing.T, pub herald.Publisher) {
	t.Helper()
	msgs, err := herald.Prepare([]herald.Message{{Topic: "orders", Key: "k", Payload: []byte(`{"n":1}`)}}, 1<<20)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(t.Context(), []herald.Envelope{{Message: msgs[0], Seq: 1, Attempt: 1, CreatedAt: time.Now(), Ordered: true}}))
}

// Open finds the queue, or the topic in the caller's account (STS), and
// the publisher it returns sends there.
func TestAnAWSDestinationOpensAndPublishes(t *testing.T) {
	t.Parallel()
	b, endpoint := motoBundle(t)
	queue, topic := freshName(false), freshName(true)
	queueURL := b.queue(t, queue, nil)
	_, subscribed := b.topic(t, topic, true)
	for _, tc := range []struct{ url, read string }{
		{"sqs://" + queue + "?region=eu-west-1&endpoint=" + endpoint, queueURL},
		{"sns://" + topic + "?region=eu-west-1&endpoint=" + endpoint, subscribed},
	} {
		pub, closePub, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "q", URL: tc.url, Getenv: awsEnv("test-secret")})
		require.NoError(t, err, tc.url)
		publishOne(t, pub)
		closePub()
		m, err := heraldaws.Parse(b.receive(t, tc.read, 1)[0])
		require.NoError(t, err)
		require.Equal(t, `{"n":1}`, string(m.Payload), tc.url)
	}
}

// claim_check= wraps the publisher: an event above the queue's limit goes
// to the bucket, on the destination's endpoint, and resolves back.
func TestAnAWSDestinationWithAClaimCheck(t *testing.T) {
	t.Parallel()
	b, endpoint := motoBundle(t)
	s3Client := newS3(awsConfig(t, endpoint))
	_, err := s3Client.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String("claims"),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraintEuWest1}})
	require.NoError(t, err)
	queue := freshName(true)
	queueURL := b.queue(t, queue, nil)
	pub, closePub, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "q", Getenv: awsEnv("test-secret"),
		URL: "sqs://" + queue + "?region=eu-west-1&endpoint=" + endpoint + "&claim_check=s3://claims/big/"})
	require.NoError(t, err)
	defer closePub()
	payload := bytes.Repeat([]byte("z"), heraldaws.DefaultMaxMessageBytes)
	// Under the limit, but not text: in base64 it is a third larger.
	binary := bytes.Repeat([]byte{0xff, 0}, 100<<10)
	envs := envelopes(t, herald.Message{Topic: "orders", Key: "k", Payload: payload},
		herald.Message{Topic: "orders", Key: "k", Payload: []byte("small")},
		herald.Message{Topic: "orders", Key: "k", Payload: binary})
	require.NoError(t, pub.Publish(t.Context(), envs))

	store, err := heraldaws.NewS3Store(s3Client, "claims")
	require.NoError(t, err)
	msgs := b.receive(t, queueURL, 3)
	var got []string
	for _, msg := range msgs {
		m, err := heraldaws.Parse(msg)
		require.NoError(t, err)
		m, err = heraldclaim.Resolve(t.Context(), store, m)
		require.NoError(t, err)
		got = append(got, fmt.Sprintf("%s:%d", m.ID, len(m.Payload)))
	}
	require.Equal(t, []string{fmt.Sprintf("%s:%d", envs[0].ID, len(payload)), envs[1].ID + ":5",
		fmt.Sprintf("%s:%d", envs[2].ID, len(binary))}, got)
	out, err := s3Client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String("claims")})
	require.NoError(t, err)
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	require.ElementsMatch(t, []string{"big/" + envs[0].ID, "big/" + envs[2].ID}, keys)
}

// A queue or topic that does not exist yet, and AWS out of reach, are
// waited for; the topic's ARN is in the region's partition.
func TestAnAWSDestinationMissingOrDownIsUnreachable(t *testing.T) {
	t.Parallel()
	_, endpoint := motoBundle(t)
	for _, tc := range []struct{ url, says string }{
		{"sqs://missing?region=eu-west-1&endpoint=" + endpoint,
			"cannot find queue missing for destination q at sqs://missing?region=eu-west-1&endpoint=" + endpoint + ": "},
		{"sns://missing?region=cn-north-1&account=123456789012&endpoint=" + endpoint,
			"cannot find topic arn:aws-cn:sns:cn-north-1:123456789012:missing for destination q at "},
		{"sns://missing?region=us-gov-west-1&endpoint=" + endpoint,
			"cannot find topic arn:aws-us-gov:sns:us-gov-west-1:123456789012:missing for destination q at "},
		{"sqs://orders?region=eu-west-1&endpoint=http://127.0.0.1:1", "cannot find queue orders for destination q at "},
	} {
		_, _, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "q", URL: tc.url, Getenv: awsEnv("hunter2-Secret")})
		var oe *heraldspec.OpenError
		require.ErrorAs(t, err, &oe, tc.url)
		require.True(t, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), tc.says)
		require.NotContains(t, err.Error(), "hunter2")
	}
}

// Credentials AWS refuses stop the start: the destination is not
// unreachable, and the secret key shows nowhere.
func TestAnAWSDestinationWhoseCredentialsAreRefusedIsNotUnreachable(t *testing.T) {
	t.Parallel()
	_, endpoint := motoBundle(t, "INITIAL_NO_AUTH_ACTION_COUNT=0")
	for _, raw := range []string{
		"sqs://orders?region=eu-west-1&endpoint=" + endpoint,
		"sns://billing?region=eu-west-1&endpoint=" + endpoint,
	} {
		_, _, err := heraldspec.Open(t.Context(), heraldspec.Destination{Name: "q", URL: raw, Getenv: awsEnv("hunter2-Secret")})
		var oe *heraldspec.OpenError
		require.ErrorAs(t, err, &oe, raw)
		require.False(t, oe.Unreachable, "%v", err)
		require.Contains(t, err.Error(), "destination q at "+raw+" refused the credentials: ")
		require.NotContains(t, err.Error(), "hunter2")
	}
}
