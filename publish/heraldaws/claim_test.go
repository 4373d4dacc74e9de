package heraldaws_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldaws"
)

// Settings of the relay child of TestRelayKilledBetweenUploadAndPublish.
const (
	claimChildEnv = "HERALD_TEST_CLAIM_CHILD" // the moto endpoint
	claimDSNEnv   = "HERALD_TEST_CLAIM_DSN"
	claimSchema   = "HERALD_TEST_CLAIM_SCHEMA"
	claimQueue    = "HERALD_TEST_CLAIM_QUEUE"
	claimBucket   = "HERALD_TEST_CLAIM_BUCKET"
)

// claimBundle is a test's moto (SQS and S3), outbox and writer.
type claimBundle struct {
	moto   *testenv.MotoServer
	sqs    *sqs.Client
	s3     *s3.Client
	bucket string
	queue  string
	dsn    string
	schema string
	pool   *pgxpool.Pool
	store  *heraldpg.Driver
	writer *herald.Writer[pgx.Tx]
}

func newS3(cfg aws.Config) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true })
}

// claimSetup starts moto with a FIFO queue and, if makeBucket, a bucket,
// and an outbox in a fresh schema taking payloads of up to 8 MiB.
func claimSetup(t *testing.T, makeBucket bool) *claimBundle {
	t.Helper()
	b := &claimBundle{moto: testenv.Moto(t), dsn: testenv.PostgresDSN(t), schema: testenv.Schema(t)}
	cfg := awsConfig(t, b.moto.URL)
	b.sqs, b.s3 = sqs.NewFromConfig(cfg), newS3(cfg)
	b.bucket = "claims-" + strings.ToLower(herald.NewID()[:8])
	if makeBucket {
		b.makeBucket(t)
	}
	out, err := b.sqs.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(freshName(true)),
		Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	b.queue = aws.ToString(out.QueueUrl)
	b.pool = testenv.PostgresPool(t)
	pgcfg := &heraldpg.Config{Schema: b.schema, MaxPayloadBytes: 8 << 20}
	b.store, err = heraldpg.New(b.pool, pgcfg)
	require.NoError(t, err)
	require.NoError(t, b.store.Migrate(t.Context()))
	b.writer, err = heraldpg.NewWriter(pgcfg)
	require.NoError(t, err)
	return b
}

func (b *claimBundle) makeBucket(t *testing.T) {
	t.Helper()
	_, err := b.s3.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(b.bucket),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraintEuWest1}})
	require.NoError(t, err)
}

func (b *claimBundle) write(t *testing.T, msgs ...herald.Message) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		return b.writer.WriteTx(t.Context(), tx, msgs...)
	}))
}

// s3Store returns the bundle's bucket as an object store.
func (b *claimBundle) s3Store(t *testing.T) *heraldaws.S3Store {
	t.Helper()
	s, err := heraldaws.NewS3Store(b.s3, b.bucket)
	require.NoError(t, err)
	return s
}

// claimPublisher returns an SQS publisher to the bundle's queue wrapped
// with claim checks into store, at SQS's default limit.
func claimPublisher(t *testing.T, sqsClient *sqs.Client, queue string, store heraldclaim.ObjectStore) herald.Publisher {
	t.Helper()
	pub, err := heraldaws.NewSQS(sqsClient, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(queue)})
	require.NoError(t, err)
	wrapped, err := heraldclaim.Wrap(pub, store, &heraldclaim.Options{Threshold: heraldaws.DefaultMaxMessageBytes})
	require.NoError(t, err)
	return wrapped
}

// claimRelayConfig is a relay with short timings.
func claimRelayConfig(store herald.Store, pub herald.Publisher, owner string, lease time.Duration) *herald.RelayConfig {
	return &herald.RelayConfig{
		Store: store, Publisher: pub, Owner: owner,
		BatchSize: 10, MaxPerKey: 10,
		Lease: lease, PublishTimeout: lease - time.Second,
		PollInterval: 5 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond,
		RescueInterval: 100 * time.Millisecond, OutageBackoffCap: 100 * time.Millisecond,
		Retry: herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 100, MaxAge: time.Hour},
	}
}

// startRelay starts a relay and stops it when the test ends.
func startRelay(t *testing.T, cfg *herald.RelayConfig) {
	t.Helper()
	r, err := herald.NewRelay(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
}

// objects lists the keys in the bundle's bucket.
func (b *claimBundle) objects(t *testing.T) []string {
	t.Helper()
	out, err := b.s3.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket)})
	require.NoError(t, err)
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// resolveAll receives n messages of the bundle's queue and resolves them.
func (b *claimBundle) resolveAll(t *testing.T, n int) []herald.Message {
	t.Helper()
	rb := &bundle{sqs: b.sqs}
	store := b.s3Store(t)
	var got []herald.Message
	for _, msg := range rb.receive(t, b.queue, n) {
		require.Less(t, len(aws.ToString(msg.Body)), 1024, "the SQS message carries a reference, not the payload")
		m, err := heraldaws.Parse(msg)
		require.NoError(t, err)
		m, err = heraldclaim.Resolve(t.Context(), store, m)
		require.NoError(t, err)
		got = append(got, m)
	}
	return got
}

func randomPayload(t *testing.T, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return p
}

func TestClaimChecksCarryFiveMegabyteEventsToFIFOInKeyOrder(t *testing.T) {
	t.Parallel()
	b := claimSetup(t, true)
	const perKey = 3
	var msgs []herald.Message
	for i := range perKey {
		for _, key := range []string{"a", "b"} {
			msgs = append(msgs, herald.Message{ID: herald.NewID(), Topic: "orders", Key: key,
				Type: fmt.Sprintf("%s.%d", key, i), Payload: randomPayload(t, 5<<20),
				Headers: map[string]string{"Content-Type": "application/octet-stream", "Traceparent": "00-" + key}})
		}
	}
	small := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "a", Type: "a.small", Payload: []byte(`{"small":true}`)}
	msgs = append(msgs, small)
	for _, m := range msgs {
		b.write(t, m) // one transaction each: commit order is the key order
	}
	startRelay(t, claimRelayConfig(b.store, claimPublisher(t, b.sqs, b.queue, b.s3Store(t)), "relay", 60*time.Second))

	got := b.resolveAll(t, len(msgs))
	require.Len(t, got, len(msgs))
	byID := map[string]herald.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	order := map[string][]string{}
	for _, m := range got {
		want, ok := byID[m.ID]
		require.True(t, ok, "unknown event %s", m.ID)
		require.True(t, bytes.Equal(want.Payload, m.Payload), "payload of %s", m.Type)
		require.Equal(t, want.Headers, m.Headers, "the producer's headers, without the reference")
		order[m.Key] = append(order[m.Key], m.Type)
	}
	require.Equal(t, []string{"a.0", "a.1", "a.2", "a.small"}, order["a"])
	require.Equal(t, []string{"b.0", "b.1", "b.2"}, order["b"])
	require.Len(t, b.objects(t), 2*perKey, "one object per large event, none for the small one")
}

func TestClaimStoreThatRefusesWritesIsAnOutage(t *testing.T) {
	t.Parallel()
	b := claimSetup(t, false) // no bucket: every PutObject is refused
	store := &countingStore{ObjectStore: b.s3Store(t)}
	m := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "k", Payload: randomPayload(t, 300<<10)}
	b.write(t, m)
	r, err := herald.NewRelay(claimRelayConfig(b.store, claimPublisher(t, b.sqs, b.queue, store), "relay", 60*time.Second))
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context()))
	require.Eventually(t, func() bool { return store.failed.Load() >= 5 }, 30*time.Second, 10*time.Millisecond,
		"the relay keeps trying the store")
	// Stopped, the relay has settled its last claim: an attempt in flight
	// counts until the outage refunds it.
	stopCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(stopCtx))
	var attempts int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT attempts FROM `+b.store.Table()+` WHERE id = $1`, m.ID).Scan(&attempts))
	require.Zero(t, attempts, "an outage spends no attempts")
	out, err := b.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(b.queue), WaitTimeSeconds: 0})
	require.NoError(t, err)
	require.Empty(t, out.Messages, "nothing is published without its object")

	b.makeBucket(t)
	startRelay(t, claimRelayConfig(b.store, claimPublisher(t, b.sqs, b.queue, store), "relay", 60*time.Second))
	got := b.resolveAll(t, 1)
	require.Equal(t, m.ID, got[0].ID)
	require.True(t, bytes.Equal(m.Payload, got[0].Payload))
	require.Equal(t, []string{heraldclaim.DefaultPrefix + m.ID}, b.objects(t))
}

// countingStore counts the writes the store refused.
type countingStore struct {
	heraldclaim.ObjectStore
	failed atomic.Int64
}

func (s *countingStore) Put(ctx context.Context, key string, body []byte, contentType string) error {
	err := s.ObjectStore.Put(ctx, key, body, contentType)
	if err != nil {
		s.failed.Add(1)
	}
	return err
}

func TestClaimDigestMismatchFailsTheConsumer(t *testing.T) {
	t.Parallel()
	b := claimSetup(t, true)
	payload := randomPayload(t, 400<<10)
	envs := envelopes(t, herald.Message{Topic: "orders", Key: "k", Payload: payload})
	require.NoError(t, publish(t, claimPublisher(t, b.sqs, b.queue, b.s3Store(t)), envs))

	// Someone replaces the object with other bytes of the same length.
	tampered := bytes.Clone(payload)
	tampered[len(tampered)/2] ^= 1
	_, err := b.s3.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(b.bucket),
		Key: aws.String(heraldclaim.DefaultPrefix + envs[0].ID), Body: bytes.NewReader(tampered)})
	require.NoError(t, err)

	msgs := (&bundle{sqs: b.sqs}).receive(t, b.queue, 1)
	m, err := heraldaws.Parse(msgs[0])
	require.NoError(t, err)
	_, err = heraldclaim.Resolve(t.Context(), b.s3Store(t), m)
	require.ErrorIs(t, err, heraldclaim.ErrMismatch)
	var mm *heraldclaim.MismatchError
	require.ErrorAs(t, err, &mm)
	require.Equal(t, heraldclaim.DefaultPrefix+envs[0].ID, mm.Key)

	_, err = b.s3.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(b.bucket),
		Key: aws.String(heraldclaim.DefaultPrefix + envs[0].ID)})
	require.NoError(t, err)
	_, err = heraldclaim.Resolve(t.Context(), b.s3Store(t), m)
	require.ErrorIs(t, err, heraldclaim.ErrNotFound)
}

func TestClaimLifecycleRuleExpiresThePrefix(t *testing.T) {
	t.Parallel()
	b := claimSetup(t, true)
	require.NoError(t, heraldaws.PutClaimLifecycle(t.Context(), b.s3, b.bucket, heraldclaim.DefaultPrefix, 7))
	out, err := b.s3.GetBucketLifecycleConfiguration(t.Context(), &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String(b.bucket)})
	require.NoError(t, err)
	require.Len(t, out.Rules, 1)
	r := out.Rules[0]
	require.Equal(t, heraldaws.ClaimLifecycleRuleID, aws.ToString(r.ID))
	require.Equal(t, heraldclaim.DefaultPrefix, aws.ToString(r.Filter.Prefix))
	require.Equal(t, int32(7), aws.ToInt32(r.Expiration.Days))

	require.ErrorContains(t, heraldaws.PutClaimLifecycle(t.Context(), b.s3, b.bucket, heraldclaim.DefaultPrefix, 0), "days")
	require.ErrorContains(t, heraldaws.PutClaimLifecycle(t.Context(), b.s3, b.bucket, "", 7), "prefix")
}

// TestRelayKilledBetweenUploadAndPublish runs a relay in a child process
// whose store SIGKILLs the process right after the upload, before the
// publish. Another relay rescues the row once the lease ends: the event is
// published once, and the bucket holds one object for it.
func TestRelayKilledBetweenUploadAndPublish(t *testing.T) {
	t.Parallel()
	b := claimSetup(t, true)
	m := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "k", Payload: randomPayload(t, 300<<10)}
	b.write(t, m)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), claimChildEnv+"="+b.moto.URL, claimDSNEnv+"="+b.dsn, claimSchema+"="+b.schema,
		claimQueue+"="+b.queue, claimBucket+"="+b.bucket)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "child: %s", stderr.String())
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child ended with %v: %s", err, stderr.String())

	key := heraldclaim.DefaultPrefix + m.ID
	require.Equal(t, []string{key}, b.objects(t), "the child uploaded the payload")
	out, err := b.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(b.queue), WaitTimeSeconds: 0})
	require.NoError(t, err)
	require.Empty(t, out.Messages, "the child died before publishing")

	startRelay(t, claimRelayConfig(b.store, claimPublisher(t, b.sqs, b.queue, b.s3Store(t)), "rescuer", 60*time.Second))
	got := b.resolveAll(t, 1)
	require.Len(t, got, 1, "published once")
	require.Equal(t, m.ID, got[0].ID)
	require.True(t, bytes.Equal(m.Payload, got[0].Payload))
	require.Equal(t, []string{key}, b.objects(t), "the same object, written again, and no other")
}

// runClaimChild is the relay of TestRelayKilledBetweenUploadAndPublish.
// It never returns: its store kills the process after the first upload.
func runClaimChild() {
	if err := claimChild(); err != nil {
		fmt.Fprintln(os.Stderr, "claim child:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "claim child: the relay stopped without uploading")
	os.Exit(2)
}

func claimChild() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv(claimDSNEnv))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := heraldpg.New(pool, &heraldpg.Config{Schema: os.Getenv(claimSchema), MaxPayloadBytes: 8 << 20})
	if err != nil {
		return err
	}
	cfg := awsConfigFor(os.Getenv(claimChildEnv))
	s3Store, err := heraldaws.NewS3Store(newS3(cfg), os.Getenv(claimBucket))
	if err != nil {
		return err
	}
	pub, err := heraldaws.NewSQS(sqs.NewFromConfig(cfg), &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(os.Getenv(claimQueue))})
	if err != nil {
		return err
	}
	wrapped, err := heraldclaim.Wrap(pub, killAfterPut{s3Store}, nil)
	if err != nil {
		return err
	}
	// A short lease, so that the parent's relay rescues the row soon.
	r, err := herald.NewRelay(claimRelayConfig(store, wrapped, "doomed", 3*time.Second))
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return errors.New("timed out before an upload")
}

// killAfterPut SIGKILLs the process once an upload succeeded.
type killAfterPut struct{ heraldclaim.ObjectStore }

func (k killAfterPut) Put(ctx context.Context, key string, body []byte, contentType string) error {
	if err := k.ObjectStore.Put(ctx, key, body, contentType); err != nil {
		return err
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal ends the process before the publish
}

// awsConfigFor is awsConfig for the child process, which has no test.
func awsConfigFor(endpoint string) aws.Config {
	return aws.Config{
		Region:       "eu-west-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		BaseEndpoint: aws.String(endpoint),
	}
}
