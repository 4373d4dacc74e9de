package heraldspec_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldclaim"
	"github.com/herald-outbox/herald/heraldspec"
)

// recPublisher keeps what it is sent; limit is its broker's message limit
// (heraldclaim.Limited), 0 for one that knows none.
type recPublisher struct {
	mu    sync.Mutex
	sent  []herald.Envelope
	limit int
}

func (p *recPublisher) Publish(_ context.Context, batch []herald.Envelope) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, batch...)
	return nil
}

type limitedPublisher struct{ *recPublisher }

func (p limitedPublisher) MaxMessageBytes() int { return p.limit }

type recTarget struct{ pub *recPublisher }

func (t recTarget) Open(context.Context) (herald.Publisher, func(), error) {
	if t.pub.limit > 0 {
		return limitedPublisher{t.pub}, func() {}, nil
	}
	return t.pub, func() {}, nil
}

// The rec:// scheme's publishers, by host, and the mem:// claim stores,
// by bucket: what the tests look at after Open.
var (
	recMu     sync.Mutex
	recPubs   = map[string]*recPublisher{}
	memStores = map[string]*heraldclaim.MemoryStore{}
	memClosed = map[string]bool{}
)

func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind: "rec", Schemes: []string{"rec"},
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			opts, err := heraldspec.Options("rec://", urls, []string{"limit"})
			if err != nil {
				return nil, err
			}
			p := &recPublisher{}
			if v := opts["limit"]; v != "" {
				p.limit, _ = strconv.Atoi(v)
			}
			recMu.Lock()
			recPubs[urls[0].Hostname()] = p
			recMu.Unlock()
			return recTarget{pub: p}, nil
		},
	})
	heraldspec.RegisterClaimStore(heraldspec.ClaimStore{
		Scheme: "mem",
		Open: func(_ context.Context, d *heraldspec.Destination, c *heraldspec.ClaimCheck) (heraldclaim.ObjectStore, func(), error) {
			if c.Bucket == "down" {
				return nil, nil, heraldspec.Unreachable(d, errors.New("dial tcp: connection refused"))
			}
			s := heraldclaim.NewMemoryStore(c.Bucket)
			recMu.Lock()
			memStores[c.Bucket] = s
			recMu.Unlock()
			return s, func() {
				recMu.Lock()
				memClosed[c.Bucket] = true
				recMu.Unlock()
			}, nil
		},
	})
}

func TestAnyDestinationTakesAClaimCheckFromItsURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, url    string
		bucket, host string
		threshold    int // the payload size above which events go to the store
	}{
		// No threshold: the broker's limit, as the publisher says it.
		{"BrokersLimit", "rec://a1?limit=3000&claim_check=mem://bucket-a1/events", "bucket-a1", "a1", 3000},
		// No threshold and no limit known: heraldclaim.DefaultThreshold.
		{"DefaultThreshold", "rec://a2?claim_check=mem://bucket-a2/events/", "bucket-a2", "a2", heraldclaim.DefaultThreshold},
		// A threshold given wins over the broker's limit.
		{"GivenThreshold", "rec://a3?limit=900000&claim_check=mem://bucket-a3/events&claim_threshold=5000", "bucket-a3", "a3", 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: tc.url})
			require.NoError(t, err)
			require.Equal(t, &heraldspec.ClaimCheck{Store: "mem", Bucket: tc.bucket, Prefix: "events/", Threshold: p.ClaimCheck().Threshold},
				p.ClaimCheck())
			pub, closePub, err := p.Open(ctx)
			require.NoError(t, err)
			// Just above the threshold as heraldclaim.Size counts, and just
			// at it.
			over := herald.Envelope{Message: herald.Message{ID: "0190a4e2-0000-7000-8000-000000000001", Topic: "t", Key: "k"}}
			over.Payload = []byte(strings.Repeat("x", tc.threshold-heraldclaim.Size(&over)+1))
			under := herald.Envelope{Message: herald.Message{ID: "0190a4e2-0000-7000-8000-000000000002", Topic: "t", Key: "k"}}
			under.Payload = []byte(strings.Repeat("y", tc.threshold-heraldclaim.Size(&under)))
			require.NoError(t, pub.Publish(ctx, []herald.Envelope{over, under}))

			recMu.Lock()
			rec, store := recPubs[tc.host], memStores[tc.bucket]
			recMu.Unlock()
			require.Len(t, rec.sent, 2)
			require.Empty(t, rec.sent[0].Payload, "the event above the threshold is sent without its payload")
			require.Equal(t, "events/"+over.ID, rec.sent[0].Headers[heraldclaim.HeaderKey])
			require.Equal(t, map[string]int{"events/" + over.ID: 1}, store.Keys(), "one object, written once")
			require.Equal(t, under.Payload, rec.sent[1].Payload, "the event at the threshold is sent as it is")

			got, err := heraldclaim.Resolve(ctx, store, rec.sent[0].Message)
			require.NoError(t, err)
			require.Equal(t, over.Payload, got.Payload)
			closePub()
			recMu.Lock()
			require.True(t, memClosed[tc.bucket], "closing the destination closes its store")
			recMu.Unlock()
		})
	}
}

func TestClaimCheckOptionsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, says string }{
		{"ThresholdAlone", "rec://h?claim_threshold=10", "claim_threshold, claim_endpoint and claim_region need claim_check=s3://BUCKET/PREFIX"},
		{"NoScheme", "rec://h?claim_check=bucket/x", `claim_check="bucket/x" is not STORE://BUCKET/PREFIX`},
		{"Credentials", "rec://h?claim_check=mem://AKID:secret-0042@bucket/x", "claim_check takes no credentials"},
		{"BadBucket", "rec://h?claim_check=mem://B_ucket/x", `claim_check: "B_ucket" is not a bucket name`},
		{"UnknownStore", "rec://h?claim_check=gs://bucket/x", "claim_check: no object store for gs:// is linked into this program"},
		{"BadThreshold", "rec://h?claim_check=mem://bucket/x&claim_threshold=-5", `claim_threshold="-5" is not a positive number of bytes`},
		{"BadEndpoint", "rec://h?claim_check=mem://bucket/x&claim_endpoint=ftp://x", `claim_endpoint="ftp://x" is not an http:// or https:// URL`},
		{"Twice", "rec://h?claim_check=mem://bucket/x&claim_check=mem://other/x", "claim_check is given 2 times"},
		{"OtherOptionsStillChecked", "rec://h?claim_check=mem://bucket/x&limt=5", "limt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := heraldspec.Parse(heraldspec.Destination{Name: "orders", URL: tc.url})
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "secret-0042")
		})
	}
	// Several URLs of one destination: the options once, or the same.
	_, err := heraldspec.Parse(heraldspec.Destination{Name: "orders",
		URL: "echo://h1?claim_check=mem://bucket/x,echo://h2?claim_check=mem://other/x"})
	require.ErrorContains(t, err, "the claim_* options of URL 2 differ from those of URL 1: give them once")
	p, err := heraldspec.Parse(heraldspec.Destination{Name: "orders",
		URL: "echo://h1,echo://h2?claim_check=mem://bucket/x"})
	require.NoError(t, err)
	require.Equal(t, "bucket", p.ClaimCheck().Bucket)
}

// A store that cannot be reached makes Open fail as a broker would: an
// *OpenError that says to try again.
func TestAClaimStoreDownIsAnOutage(t *testing.T) {
	t.Parallel()
	_, _, err := heraldspec.Open(context.Background(), heraldspec.Destination{Name: "orders", URL: "rec://d1?claim_check=mem://down/x"})
	var oe *heraldspec.OpenError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable)
}
