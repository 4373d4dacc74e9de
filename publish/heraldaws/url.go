package heraldaws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/heraldspec"
)

// sqs:// and sns:// destinations, as heraldspec opens them:
//
//	sqs://QUEUE?region=R&account=ID&endpoint=URL&max_message_bytes=N
//	sqs://sqs.R.amazonaws.com/ID/QUEUE (a queue URL, https:// left out)
//	sns://TOPIC?region=R&account=ID&endpoint=URL&max_message_bytes=N
//
// and, on either, claim checks (see package heraldclaim):
//
//	&claim_check=s3://BUCKET/PREFIX&claim_threshold=N&claim_endpoint=URL
//
// Every option may be left out: the region then comes from the AWS
// configuration (AWS_REGION, the shared config file), the account is the
// caller's own, the endpoint AWS's. max_message_bytes (1 to 1048576) is
// the publisher's MaxMessageBytes. claim_check stores the payload of an
// event above claim_threshold bytes (default: max_message_bytes, or the
// publisher's default) in the S3 bucket under PREFIX (default
// heraldclaim.DefaultPrefix) first; the S3 client is the destination's,
// on claim_endpoint (default: endpoint) with path-style addressing when
// either is given, for an S3-compatible store. Credentials come from the AWS chain
// (the environment, the shared files, a role), never from the URL, which
// refuses them. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_REGION and AWS_PROFILE are read through the
// Destination's Getenv; the SDK reads the rest of the chain itself.
func init() {
	heraldspec.RegisterClaimStore(heraldspec.ClaimStore{Scheme: "s3", Open: openClaimStore})
	for _, kind := range []string{"sqs", "sns"} {
		heraldspec.Register(heraldspec.Scheme{
			Kind:           kind,
			Schemes:        []string{kind},
			OwnClaimChecks: true,
			Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
				return ParseURL(d, urls[0])
			},
		})
	}
}

// URLConfig is a checked sqs:// or sns:// destination. Open loads the AWS
// configuration and finds the queue or the topic.
type URLConfig struct {
	// Kind is "sqs" or "sns".
	Kind string
	// Name is the queue's or the topic's name.
	Name string
	// Region is the region the URL gives (region=, or a queue URL's host);
	// "" leaves it to the AWS configuration.
	Region string
	// Account is the AWS account that owns the queue or the topic; "" is
	// the caller's own.
	Account string
	// Endpoint is the URL of the service to call instead of AWS's
	// (LocalStack, moto, a VPC endpoint); "" is AWS's.
	Endpoint string
	// SQS is the publisher's Config of an sqs:// destination; Open sets
	// its QueueURL. Zero for sns://.
	SQS SQSConfig
	// SNS is the publisher's Config of an sns:// destination; Open sets
	// its TopicARN. Zero for sqs://.
	SNS SNSConfig
	// ClaimBucket, when set, turns claim checks on: payloads above
	// ClaimThreshold go to this S3 bucket, under ClaimPrefix.
	ClaimBucket, ClaimPrefix string
	// ClaimThreshold is the claim checks' threshold; 0 is the publisher's
	// MaxMessageBytes.
	ClaimThreshold int
	// ClaimEndpoint is the URL of the S3-compatible store; "" is Endpoint,
	// or AWS's S3 when that is "" too.
	ClaimEndpoint string

	d *heraldspec.Destination
}

var (
	awsQueueName  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,75}(\.fifo)?$`)
	awsTopicName  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,251}(\.fifo)?$`)
	awsRegion     = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	awsAccount    = regexp.MustCompile(`^[0-9]{12}$`)
	awsQueueHost  = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)
	awsOptionList = "region, account, endpoint, max_message_bytes, claim_check, claim_threshold or claim_endpoint"
)

// ParseURL checks an sqs:// or sns:// URL of d (see the package's URL
// form), with the publisher's Config that d.Config gives (an *SQSConfig
// or an *SNSConfig), and connects to nothing. Errors quote nothing but
// option names and values, never the URL's user information.
func ParseURL(d *heraldspec.Destination, u *url.URL) (*URLConfig, error) {
	kind := strings.ToLower(u.Scheme)
	c := &URLConfig{Kind: kind, Name: u.Host, d: d}
	switch base := d.Config.(type) {
	case nil:
	case *SQSConfig:
		if base != nil {
			c.SQS = *base
		}
	case *SNSConfig:
		if base != nil {
			c.SNS = *base
		}
	}
	if want := "*heraldaws." + strings.ToUpper(kind) + "Config"; d.Config != nil && fmt.Sprintf("%T", d.Config) != want {
		return nil, fmt.Errorf("Destination.Config is a %T, not a %s", d.Config, want)
	}
	if u.User != nil {
		return nil, errors.New("an " + kind + ":// URL takes no credentials: they come from the AWS credential chain " +
			"(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a role)")
	}
	path := strings.Trim(u.Path, "/")
	switch {
	case kind == "sqs" && path != "":
		// A queue URL: https://sqs.REGION.amazonaws.com/ACCOUNT/NAME.
		parts := strings.Split(path, "/")
		m := awsQueueHost.FindStringSubmatch(u.Hostname())
		if len(parts) != 2 || m == nil {
			return nil, errors.New("an sqs:// URL is sqs://QUEUE?region=... or sqs://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE")
		}
		c.Region, c.Account, c.Name = m[1], parts[0], parts[1]
	case path != "":
		return nil, errors.New("an sns:// URL is sns://TOPIC?region=...&account=...: no path")
	}
	if err := c.options(u); err != nil {
		return nil, err
	}
	switch {
	case kind == "sqs" && !awsQueueName.MatchString(c.Name):
		return nil, fmt.Errorf("%q is not an SQS queue name (letters, digits, - and _, up to 80 characters with .fifo)", heraldspec.Clean(c.Name))
	case kind == "sns" && !awsTopicName.MatchString(c.Name):
		return nil, fmt.Errorf("%q is not an SNS topic name (letters, digits, - and _, up to 256 characters with .fifo)", heraldspec.Clean(c.Name))
	case c.Region != "" && !awsRegion.MatchString(c.Region):
		return nil, fmt.Errorf("region=%q is not an AWS region such as eu-west-1", heraldspec.Clean(c.Region))
	case c.Account != "" && !awsAccount.MatchString(c.Account):
		return nil, fmt.Errorf("account=%q is not a 12-digit AWS account id", heraldspec.Clean(c.Account))
	}
	for _, ep := range []struct{ name, url string }{{"endpoint", c.Endpoint}, {"claim_endpoint", c.ClaimEndpoint}} {
		if ep.url == "" {
			continue
		}
		e, err := url.Parse(ep.url)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil {
			return nil, errors.New(ep.name + " is not an http:// or https:// URL without credentials")
		}
	}
	if c.ClaimBucket == "" && (c.ClaimThreshold != 0 || c.ClaimEndpoint != "") {
		return nil, errors.New("claim_threshold and claim_endpoint need claim_check=s3://BUCKET/PREFIX")
	}
	// The publisher's own checks, with a client that is never called.
	if _, err := c.publisher(sqs.New(sqs.Options{}), sns.New(sns.Options{}), ""); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "heraldaws: "))
	}
	return c, nil
}

// options reads the URL's query into c.
func (c *URLConfig) options(u *url.URL) error {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return errors.New("the query is not name=value pairs")
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vs := q[name]
		if len(vs) > 1 {
			return fmt.Errorf("option %q is given twice", heraldspec.Clean(name))
		}
		v := vs[0]
		switch name {
		case "region":
			c.Region = v
		case "account":
			c.Account = v
		case "endpoint":
			c.Endpoint = v
		case "max_message_bytes":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1<<20 {
				return fmt.Errorf("max_message_bytes=%q is not a number of bytes from 1 to 1048576", heraldspec.Clean(v))
			}
			c.SQS.MaxMessageBytes, c.SNS.MaxMessageBytes = n, n
		case "claim_check":
			if err := c.claimCheck(v); err != nil {
				return err
			}
		case "claim_threshold":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("claim_threshold=%q is not a positive number of bytes", heraldspec.Clean(v))
			}
			c.ClaimThreshold = n
		case "claim_endpoint":
			c.ClaimEndpoint = v
		default:
			return fmt.Errorf("%s option %q is not supported: use %s", c.Kind, heraldspec.Clean(name), awsOptionList)
		}
	}
	return nil
}

// s3Bucket is an S3 bucket name: 3 to 63 lower-case letters, digits, '.'
// and '-', starting and ending with a letter or a digit.
var s3Bucket = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// claimCheck reads claim_check=s3://BUCKET/PREFIX.
func (c *URLConfig) claimCheck(v string) error {
	u, err := url.Parse(v)
	switch {
	case strings.ContainsAny(v, "@#") || (err == nil && u.User != nil):
		// It may hold a secret: quote none of it.
		return errors.New("claim_check is not s3://BUCKET/PREFIX: it takes no credentials, which come from the AWS credential chain")
	case err != nil || u.Scheme != "s3" || u.RawQuery != "":
		return fmt.Errorf("claim_check=%q is not s3://BUCKET/PREFIX", heraldspec.Clean(v))
	}
	if !s3Bucket.MatchString(u.Host) {
		return fmt.Errorf("claim_check: %q is not an S3 bucket name", heraldspec.Clean(u.Host))
	}
	c.ClaimBucket, c.ClaimPrefix = u.Host, strings.TrimPrefix(u.Path, "/")
	if c.ClaimPrefix != "" && !strings.HasSuffix(c.ClaimPrefix, "/") {
		c.ClaimPrefix += "/" // a folder, as the URL reads: s3://b/events holds events/ID
	}
	return nil
}

// claims wraps pub with claim checks into the S3 bucket of c, when c has
// one.
func (c *URLConfig) claims(pub herald.Publisher, cfg aws.Config) (herald.Publisher, error) {
	if c.ClaimBucket == "" {
		return pub, nil
	}
	endpoint := c.ClaimEndpoint
	if endpoint == "" {
		endpoint = c.Endpoint
	}
	store, err := NewS3Store(claimClient(cfg, endpoint), c.ClaimBucket)
	if err != nil {
		return nil, err
	}
	threshold := c.ClaimThreshold
	if threshold == 0 {
		threshold = c.SQS.MaxMessageBytes
		if c.Kind == "sns" {
			threshold = c.SNS.MaxMessageBytes
		}
	}
	if threshold == 0 {
		threshold = DefaultMaxMessageBytes
	}
	ce := c.d.CloudEvents
	if ce == nil {
		ce = c.SQS.CloudEvents
		if c.Kind == "sns" {
			ce = c.SNS.CloudEvents
		}
	}
	return heraldclaim.Wrap(pub, store, &heraldclaim.Options{Threshold: threshold, Prefix: c.ClaimPrefix, Size: MessageSize(ce)})
}

// claimClient is the S3 client of claim checks: path-style addressing on
// an endpoint of its own (an S3-compatible store).
func claimClient(cfg aws.Config, endpoint string) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
			// Stores that speak S3 do not all take the checksums the SDK
			// adds by default; Resolve checks the SHA-256 itself.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
}

// publisher builds the publisher of c over the client of its kind, to
// dest (the queue's URL or the topic's ARN), with the destination's logger
// and CloudEvents when it sets them.
func (c *URLConfig) publisher(sq SQSClient, sn SNSClient, dest string) (herald.Publisher, error) {
	if c.Kind == "sqs" {
		cfg := c.SQS
		cfg.QueueURL = Fixed(dest)
		cfg.Logger, cfg.CloudEvents = override(cfg.Logger, c.d.Logger), override(cfg.CloudEvents, c.d.CloudEvents)
		return NewSQS(sq, &cfg)
	}
	cfg := c.SNS
	cfg.TopicARN = Fixed(dest)
	cfg.Logger, cfg.CloudEvents = override(cfg.Logger, c.d.Logger), override(cfg.CloudEvents, c.d.CloudEvents)
	return NewSNS(sn, &cfg)
}

// override is the destination's setting when it has one, else the
// Config's.
func override[T any](config, dest *T) *T {
	if dest != nil {
		return dest
	}
	return config
}

// The variables of the AWS credential chain read through the Destination's
// Getenv, so that a program (the herald daemon, its tests) may give its
// own environment; the SDK reads the rest (AWS_CONFIG_FILE, web identity,
// ...) from the process's.
const (
	awsAccessKeyEnv    = "AWS_ACCESS_KEY_ID"
	awsSecretKeyEnv    = "AWS_SECRET_ACCESS_KEY"
	awsSessionTokenEnv = "AWS_SESSION_TOKEN"
	awsRegionEnv       = "AWS_REGION"
	awsProfileEnv      = "AWS_PROFILE"
)

// Open loads the AWS configuration as the SDK does, with the URL's region
// and endpoint, finds the queue's URL (sqs:GetQueueUrl) or checks that
// the topic exists (sns:GetTopicAttributes, the account found with
// sts:GetCallerIdentity when the URL gives none), and returns the
// publisher and what closes its idle connections. A queue or topic that
// does not exist yet is Unreachable, as AWS down is: it may be created
// after the relay starts; credentials AWS refuses are not.
func (c *URLConfig) Open(ctx context.Context) (herald.Publisher, func(), error) {
	d := c.d
	log := d.Log()
	cfg, err := c.load(ctx, log)
	if err != nil {
		return nil, nil, heraldspec.Failed(d, false, err, "destination "+d.Name+": "+err.Error())
	}
	if c.Endpoint != "" {
		cfg.BaseEndpoint = aws.String(c.Endpoint)
	}
	if cfg.Region == "" {
		return nil, nil, heraldspec.Failed(d, false, errors.New("no AWS region"),
			"destination "+d.Name+": no AWS region: add ?region= to the URL or set "+awsRegionEnv)
	}
	// A transport of its own, whose idle connections the closer closes.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	cfg.HTTPClient = &http.Client{Transport: transport}
	pctx, cancel := context.WithTimeout(ctx, d.Timeout())
	defer cancel()
	var dest string
	if c.Kind == "sqs" {
		dest, err = c.queueURL(pctx, sqs.NewFromConfig(cfg))
	} else {
		dest, err = c.topicARN(pctx, cfg)
	}
	if err != nil {
		transport.CloseIdleConnections()
		return nil, nil, err
	}
	pub, err := c.publisher(sqs.NewFromConfig(cfg), sns.NewFromConfig(cfg), dest)
	if err == nil {
		pub, err = c.claims(pub, cfg)
	}
	if err != nil {
		transport.CloseIdleConnections()
		return nil, nil, heraldspec.Failed(d, false, err, "destination "+d.Name+": "+err.Error())
	}
	return pub, transport.CloseIdleConnections, nil
}

// queueURL asks SQS for the queue's URL.
func (c *URLConfig) queueURL(ctx context.Context, client *sqs.Client) (string, error) {
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(c.Name)}
	if c.Account != "" {
		in.QueueOwnerAWSAccountId = aws.String(c.Account)
	}
	out, err := client.GetQueueUrl(ctx, in)
	if err != nil {
		return "", c.failed("find queue "+c.Name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// topicARN makes the topic's ARN, in the caller's account when the URL
// names none, and checks that the topic exists.
func (c *URLConfig) topicARN(ctx context.Context, cfg aws.Config) (string, error) {
	account := c.Account
	if account == "" {
		out, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			return "", c.failed("find the AWS account", err)
		}
		account = aws.ToString(out.Account)
	}
	arn := fmt.Sprintf("arn:%s:sns:%s:%s:%s", partition(cfg.Region), cfg.Region, account, c.Name)
	if _, err := sns.NewFromConfig(cfg).GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(arn)}); err != nil {
		return "", c.failed("find topic "+arn, err)
	}
	return arn, nil
}

// failed is the *heraldspec.OpenError of a call to AWS: refused
// credentials, or an AWS (or a queue, a topic) to wait for. A 403 is a
// refusal even when its body says nothing the SDK can read (an emulator's
// or a proxy's page): AWS answers 403 to credentials and permissions only.
func (c *URLConfig) failed(what string, err error) error {
	var (
		api  smithy.APIError
		resp *awshttp.ResponseError
	)
	if (errors.As(err, &api) && credentialRefused(api.ErrorCode())) ||
		(errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusForbidden) {
		return heraldspec.RefusedCredentials(c.d, err)
	}
	return heraldspec.Failed(c.d, true, err, fmt.Sprintf("cannot %s for destination %s at %s: %s",
		what, c.d.Name, c.d.Display(), err.Error()))
}

// load loads the AWS configuration as the SDK does, with the region of
// the URL, and the credentials, region and profile of the destination's
// environment. The SDK logs to log (it would print its warnings to
// stderr), and its retries too when log shows Debug.
func (c *URLConfig) load(ctx context.Context, log *slog.Logger) (aws.Config, error) {
	d := c.d
	opts := []func(*config.LoadOptions) error{config.WithLogger(Logger(log))}
	if log.Enabled(ctx, slog.LevelDebug) {
		opts = append(opts, config.WithClientLogMode(aws.LogRetries))
	}
	if p := d.Env(awsProfileEnv); p != "" {
		opts = append(opts, config.WithSharedConfigProfile(p))
	}
	if r := d.Env(awsRegionEnv); r != "" {
		opts = append(opts, config.WithRegion(r))
	}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	id, secret := d.Env(awsAccessKeyEnv), d.Env(awsSecretKeyEnv)
	if id != "" && secret != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, secret, d.Env(awsSessionTokenEnv))))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil && secret != "" {
		// The SDK's errors do not quote the keys; be sure of it.
		err = errors.New(strings.ReplaceAll(err.Error(), secret, heraldspec.Redacted))
	}
	return cfg, err
}

// partition is the ARN partition of an AWS region.
func partition(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}

// credentialRefused reports whether an AWS error code says the
// credentials are wrong or lack a permission: configuration, not an AWS
// to wait for.
func credentialRefused(code string) bool {
	switch code {
	case "AccessDenied", "AccessDeniedException", "AuthorizationError", "InvalidClientTokenId",
		"SignatureDoesNotMatch", "UnrecognizedClientException", "ExpiredToken", "ExpiredTokenException",
		"InvalidSecurity", "MissingAuthenticationToken", "IncompleteSignature":
		return true
	}
	return false
}
