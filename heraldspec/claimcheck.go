package heraldspec

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldclaim"
)

// Claim checks on any destination. A destination URL may carry
//
//	claim_check=s3://BUCKET/PREFIX&claim_threshold=N&claim_endpoint=URL&claim_region=R
//
// and the payload of an event above the threshold then goes to the bucket
// first, the message carrying the reference (package heraldclaim). The
// threshold defaults to the broker's own limit when the publisher knows it
// (heraldclaim.Limited: a NATS server's max_payload, a Kafka producer's
// largest record), else to heraldclaim.DefaultThreshold. The object store
// comes from the package that registered its scheme (heraldaws: s3). A
// Scheme with OwnClaimChecks (sqs, sns) reads these options itself.

// ClaimCheck is a destination's claim check, read from its URL.
type ClaimCheck struct {
	// Store is the object store's URL scheme: "s3".
	Store string
	// Bucket and Prefix: where the payloads go, under Prefix + event id.
	Bucket, Prefix string
	// Threshold in bytes; 0 is the publisher's limit (see above).
	Threshold int
	// Endpoint of an S3-compatible store (MinIO, moto); "" is the
	// provider's own, found as its SDK finds it.
	Endpoint string
	// Region of the bucket; "" is the environment's (AWS_REGION).
	Region string
}

// ClaimStore is what a package with an object store registers for claim
// checks: the URL scheme of its buckets and how it opens one.
type ClaimStore struct {
	// Scheme is the claim_check URL's scheme: "s3".
	Scheme string
	// Open connects the store of c for the destination d (its Env, Logger
	// and Timeout). The returned func releases what it holds. A failure
	// is an *OpenError.
	Open func(ctx context.Context, d *Destination, c *ClaimCheck) (heraldclaim.ObjectStore, func(), error)
}

var claimStores = struct {
	sync.RWMutex
	byScheme map[string]ClaimStore
}{byScheme: map[string]ClaimStore{}}

// RegisterClaimStore makes claim_check URLs of s.Scheme open through s.
// Packages call it from init; it panics when a scheme is registered twice.
func RegisterClaimStore(s ClaimStore) {
	if s.Scheme == "" || s.Open == nil {
		panic("heraldspec: RegisterClaimStore needs a Scheme and Open")
	}
	claimStores.Lock()
	defer claimStores.Unlock()
	if _, dup := claimStores.byScheme[s.Scheme]; dup {
		panic("heraldspec: claim store " + s.Scheme + ":// is registered twice")
	}
	claimStores.byScheme[s.Scheme] = s
}

func lookupClaimStore(scheme string) (ClaimStore, bool) {
	claimStores.RLock()
	defer claimStores.RUnlock()
	s, ok := claimStores.byScheme[scheme]
	return s, ok
}

// claimOptions are the URL options of a claim check.
var claimOptions = []string{"claim_check", "claim_threshold", "claim_endpoint", "claim_region"}

// bucketName is an S3 bucket name's form: what claim_check takes as its
// host.
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// takeClaimCheck removes the claim options from urls' queries (so that the
// scheme's own parser never sees them) and returns the claim check they
// set, nil when none. Given on several URLs of one destination, they must
// agree.
func takeClaimCheck(urls []*url.URL) (*ClaimCheck, error) {
	var (
		found map[string]string
		from  int
	)
	for i, u := range urls {
		q := u.Query()
		got := map[string]string{}
		for _, name := range claimOptions {
			if vs, ok := q[name]; ok {
				if len(vs) != 1 {
					return nil, fmt.Errorf("%s is given %d times", name, len(vs))
				}
				got[name] = vs[0]
				q.Del(name)
			}
		}
		if len(got) == 0 {
			continue
		}
		u.RawQuery = q.Encode()
		if found != nil && !sameOptions(found, got) {
			return nil, fmt.Errorf("the claim_* options of URL %d differ from those of URL %d: give them once", i+1, from+1)
		}
		found, from = got, i
	}
	if found == nil {
		return nil, nil
	}
	return parseClaimCheck(found)
}

func sameOptions(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// parseClaimCheck checks the claim options.
func parseClaimCheck(opts map[string]string) (*ClaimCheck, error) {
	raw, ok := opts["claim_check"]
	if !ok {
		return nil, errors.New("claim_threshold, claim_endpoint and claim_region need claim_check=s3://BUCKET/PREFIX")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Scheme == "" || u.Opaque != "":
		return nil, fmt.Errorf("claim_check=%q is not STORE://BUCKET/PREFIX (s3://BUCKET/PREFIX)", Clean(raw))
	case u.User != nil:
		return nil, errors.New("claim_check takes no credentials: they come from the store's own credential chain (AWS_ACCESS_KEY_ID, a profile, a role)")
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("claim_check=%q has a query or fragment: give claim_threshold, claim_endpoint and claim_region as options of the destination URL", Clean(raw))
	case !bucketName.MatchString(u.Host):
		return nil, fmt.Errorf("claim_check: %q is not a bucket name (3 to 63 lower-case letters, digits, '.' and '-')", Clean(u.Host))
	}
	c := &ClaimCheck{Store: strings.ToLower(u.Scheme), Bucket: u.Host, Prefix: strings.TrimPrefix(u.Path, "/"), Region: opts["claim_region"]}
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/" // a folder, as the URL reads: s3://b/events holds events/ID
	}
	if _, ok := lookupClaimStore(c.Store); !ok {
		return nil, fmt.Errorf("claim_check: no object store for %s:// is linked into this program (s3:// comes with package heraldaws)", Clean(c.Store))
	}
	if v, ok := opts["claim_threshold"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("claim_threshold=%q is not a positive number of bytes", Clean(v))
		}
		c.Threshold = n
	}
	if v, ok := opts["claim_endpoint"]; ok {
		e, err := url.Parse(v)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil {
			return nil, fmt.Errorf("claim_endpoint=%q is not an http:// or https:// URL without credentials", Clean(v))
		}
		c.Endpoint = v
	}
	return c, nil
}

// claimTarget opens a destination's publisher and its claim store, and
// wraps the one with the other.
type claimTarget struct {
	Target
	d *Destination
	c *ClaimCheck
}

// Open opens the publisher, then the store: a store that cannot be
// reached is the destination's outage, as a broker would be.
func (t *claimTarget) Open(ctx context.Context) (herald.Publisher, func(), error) {
	pub, closePub, err := t.Target.Open(ctx)
	if err != nil {
		return nil, nil, err
	}
	s, _ := lookupClaimStore(t.c.Store)
	store, closeStore, err := s.Open(ctx, t.d, t.c)
	if err != nil {
		closePub()
		return nil, nil, err
	}
	threshold := t.c.Threshold
	if threshold == 0 {
		threshold = heraldclaim.DefaultThreshold
		if l, ok := pub.(heraldclaim.Limited); ok && l.MaxMessageBytes() > 0 {
			threshold = l.MaxMessageBytes()
		}
	}
	wrapped, err := heraldclaim.Wrap(pub, store, &heraldclaim.Options{Threshold: threshold, Prefix: t.c.Prefix})
	if err != nil {
		closeStore()
		closePub()
		return nil, nil, Refused(t.d, err, ": %s", err)
	}
	closeBoth := func() {
		closePub()
		closeStore()
	}
	if checker, ok := pub.(TargetChecker); ok {
		return claimChecked{Publisher: wrapped, TargetChecker: checker}, closeBoth, nil
	}
	return wrapped, closeBoth, nil
}

// claimChecked is a wrapped publisher that still checks its targets.
type claimChecked struct {
	herald.Publisher
	TargetChecker
}
