// Package heraldclaim moves large payloads out of the broker message: a
// claim check. A destination wrapped with Wrap stores the payload of an
// event above a threshold in an object store (Amazon S3 or anything
// S3-compatible, see heraldaws.S3Store) and publishes the event with an
// empty payload and a reference in headers: bucket, key, size, SHA-256 and
// content type. The rest of the event (id, key, headers, trace context)
// travels as usual. A consumer gets the payload back with one call,
// Resolve, after the publisher package's Parse helper; heraldinbox's
// ProcessClaim* do the same inside the inbox transaction.
//
// The object is written before the publish, under a key made of the event
// id (Options.Prefix + id): a retry, or a second relay after a crash
// between the upload and the publish, writes the same object with the same
// bytes, so there is never a second copy. An object store that fails makes
// the whole batch fail with an ordinary error, which the relay takes as an
// outage of the destination: it backs off and retries without spending the
// events' attempts, and nothing is lost.
//
// Objects are removed by the bucket's lifecycle rule (an expiration on the
// prefix, in days at least the outbox's retention plus the consumers'
// redelivery window); see docs/claim-checks.md.
package heraldclaim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/herald-outbox/herald"
)

// Headers of a claim check. They are ordinary header names (not Herald-*)
// so that every publisher carries them, and every Parse helper returns
// them, as it does a producer's headers. A wrapped publisher drops a
// producer's own headers of these names, so a consumer of a wrapped
// destination only sees references the relay wrote.
const (
	HeaderBucket      = "Claim-Check-Bucket"
	HeaderKey         = "Claim-Check-Key"
	HeaderSize        = "Claim-Check-Size"
	HeaderSHA256      = "Claim-Check-Sha256"
	HeaderContentType = "Claim-Check-Content-Type"
)

var claimHeaders = []string{HeaderBucket, HeaderKey, HeaderSize, HeaderSHA256, HeaderContentType}

// isClaimHeader reports whether name is one of the claim-check headers, in
// any case (some brokers and HTTP change the case of names).
func isClaimHeader(name string) bool {
	for _, h := range claimHeaders {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// DefaultThreshold is the default Options.Threshold: 256 KiB, the limit of
// an SNS message and of an SQS message by default. Set it to your broker's
// limit: see docs/claim-checks.md for each broker's.
const DefaultThreshold = 256 << 10

// Limited is implemented by publishers that know the largest message
// their broker takes (a NATS server's max_payload, a Kafka producer's
// largest record): a claim check configured by URL (package heraldspec)
// offloads the events above it when no threshold is given.
type Limited interface {
	MaxMessageBytes() int
}

// DefaultPrefix is the default Options.Prefix.
const DefaultPrefix = "herald/"

// DefaultContentType is the content type of a stored payload whose event
// has no Content-Type header and no Options.ContentType.
const DefaultContentType = "application/octet-stream"

// ErrNotFound is wrapped by an ObjectStore's Get when the object does not
// exist (deleted by the lifecycle rule, or never written).
var ErrNotFound = errors.New("heraldclaim: object not found")

// ErrMismatch is matched by every *MismatchError.
var ErrMismatch = errors.New("heraldclaim: stored object does not match the reference")

// ObjectStore is a bucket of an object store. Implementations must be safe
// for concurrent use: the relay publishes from several goroutines.
type ObjectStore interface {
	// Bucket names the bucket; Wrap writes it in HeaderBucket, and Resolve
	// refuses a reference to another bucket.
	Bucket() string
	// Put stores body under key, replacing an object already there.
	Put(ctx context.Context, key string, body []byte, contentType string) error
	// Get opens the object under key; an error wrapping ErrNotFound when
	// there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
}

// Options configure Wrap. A nil *Options means the defaults.
type Options struct {
	// Threshold: an event whose size (see the Size option) is above it
	// is offloaded. Defaults to DefaultThreshold.
	Threshold int
	// Size measures an event's broker message as the broker counts it
	// against its limit (heraldaws.MessageSize does for SQS and SNS,
	// where a payload that is not text grows by a third in base64).
	// Defaults to the package's Size.
	Size func(env *herald.Envelope) int
	// Uploads is how many payloads of one batch are written at a time.
	// Defaults to 4.
	Uploads int
	// Prefix is put before the event id to make the object key, and names
	// the objects a lifecycle rule expires. Defaults to DefaultPrefix.
	Prefix string
	// ContentType of the stored payload when the event has no Content-Type
	// header. Defaults to DefaultContentType.
	ContentType string
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Threshold < 0 {
		return c, fmt.Errorf("heraldclaim: Options.Threshold is %d, want 0 (the default) or more", c.Threshold)
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if strings.HasPrefix(c.Prefix, "/") {
		return c, fmt.Errorf("heraldclaim: Options.Prefix %q starts with a slash", c.Prefix)
	}
	if c.ContentType == "" {
		c.ContentType = DefaultContentType
	}
	if c.Size == nil {
		c.Size = Size
	}
	if c.Uploads < 0 {
		return c, fmt.Errorf("heraldclaim: Options.Uploads is %d, want 0 (the default) or more", c.Uploads)
	}
	if c.Uploads == 0 {
		c.Uploads = 4
	}
	return c, nil
}

// Key returns the object key of the event with id under prefix: prefix
// followed by the id. Derived from the event id alone, so every attempt
// and every relay writes the same object.
func Key(prefix, id string) string { return prefix + id }

// Size estimates the size of env's broker message as a broker counts it:
// the payload, the producer's headers and Herald's own headers (the
// event's text fields and a fixed allowance for the header names): the
// default of Options.Size.
func Size(env *herald.Envelope) int {
	const heraldHeaders = 256 // names of the Herald-* headers, versions
	n := len(env.Payload) + heraldHeaders + len(env.ID) + len(env.Topic) + len(env.Key) +
		len(env.Type) + len(env.AggregateType) + len(env.AggregateID)
	for k, v := range env.Headers {
		n += len(k) + len(v)
	}
	return n
}

// Wrap returns a publisher that offloads the payload of each event above
// opts.Threshold to store before it hands the batch to next. See the
// package documentation.
func Wrap(next herald.Publisher, store ObjectStore, opts *Options) (herald.Publisher, error) {
	if next == nil {
		return nil, errors.New("heraldclaim: Wrap needs a publisher")
	}
	if store == nil {
		return nil, errors.New("heraldclaim: Wrap needs an object store")
	}
	if store.Bucket() == "" {
		return nil, errors.New("heraldclaim: the object store names no bucket")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &publisher{next: next, objects: store, opts: o}, nil
}

type publisher struct {
	next    herald.Publisher
	objects ObjectStore
	opts    Options
}

// Publish stores the large payloads, then publishes the batch with
// references in their place. The batch keeps its length and order, so a
// *herald.BatchError of next applies to it as it is.
func (p *publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	var (
		out     []herald.Envelope // a copy, made at the first change
		uploads []upload
	)
	for i := range batch {
		env := &batch[i]
		big := p.opts.Size(env) > p.opts.Threshold
		if !big && !hasClaimHeader(env.Headers) {
			continue
		}
		if out == nil {
			out = append([]herald.Envelope(nil), batch...)
		}
		headers := make(map[string]string, len(env.Headers)+len(claimHeaders))
		contentType := p.opts.ContentType
		for name, v := range env.Headers {
			if isClaimHeader(name) {
				continue // only the relay writes references
			}
			if strings.EqualFold(name, "Content-Type") && v != "" {
				contentType = v
			}
			headers[name] = v
		}
		out[i].Headers = headers
		if !big {
			continue
		}
		sum := sha256.Sum256(env.Payload)
		key := Key(p.opts.Prefix, env.ID)
		headers[HeaderBucket] = p.objects.Bucket()
		headers[HeaderKey] = key
		headers[HeaderSize] = strconv.Itoa(len(env.Payload))
		headers[HeaderSHA256] = hex.EncodeToString(sum[:])
		headers[HeaderContentType] = contentType
		out[i].Payload = []byte{}
		uploads = append(uploads, upload{env: env, key: key, contentType: contentType})
	}
	if out == nil {
		return p.next.Publish(ctx, batch)
	}
	// Any failure of the store fails the batch as a whole, before anything
	// is published: to the relay that is an outage of the destination,
	// retried without spending attempts. An event is never published
	// without its object.
	if err := p.store(ctx, uploads); err != nil {
		return err
	}
	return p.next.Publish(ctx, out)
}

// upload is one payload to store.
type upload struct {
	env              *herald.Envelope
	key, contentType string
}

// store writes the uploads, Options.Uploads at a time, and returns the
// first error once all are done.
func (p *publisher) store(ctx context.Context, uploads []upload) error {
	errs := make([]error, len(uploads))
	sem := make(chan struct{}, p.opts.Uploads)
	var wg sync.WaitGroup
	for i, u := range uploads {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := p.objects.Put(ctx, u.key, u.env.Payload, u.contentType); err != nil {
				errs[i] = fmt.Errorf("heraldclaim: storing the payload of event %s in bucket %s: %w", u.env.ID, p.objects.Bucket(), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func hasClaimHeader(h map[string]string) bool {
	for name := range h {
		if isClaimHeader(name) {
			return true
		}
	}
	return false
}

// Ref is a claim check read from a message's headers.
type Ref struct {
	Bucket, Key string
	Size        int64
	SHA256      string // lower-case hex
	ContentType string
}

// RefOf reads the claim check of a received message's headers, with
// ok=false when it has none. A reference with a header missing or
// malformed is an error.
func RefOf(headers map[string]string) (ref Ref, ok bool, err error) {
	get := func(name string) (string, bool) {
		for k, v := range headers {
			if strings.EqualFold(k, name) {
				return v, true
			}
		}
		return "", false
	}
	if !hasClaimHeader(headers) {
		return Ref{}, false, nil
	}
	for _, name := range []string{HeaderBucket, HeaderKey, HeaderSize, HeaderSHA256} {
		if v, found := get(name); !found || v == "" {
			return Ref{}, true, fmt.Errorf("heraldclaim: claim check without header %s", name)
		}
	}
	ref.Bucket, _ = get(HeaderBucket)
	ref.Key, _ = get(HeaderKey)
	ref.ContentType, _ = get(HeaderContentType)
	size, _ := get(HeaderSize)
	if ref.Size, err = strconv.ParseInt(size, 10, 64); err != nil || ref.Size < 0 {
		return Ref{}, true, fmt.Errorf("heraldclaim: header %s is %.32q, not a size", HeaderSize, size)
	}
	ref.SHA256, _ = get(HeaderSHA256)
	if b, err := hex.DecodeString(ref.SHA256); err != nil || len(b) != sha256.Size {
		return Ref{}, true, fmt.Errorf("heraldclaim: header %s is %.80q, not a SHA-256 in hex", HeaderSHA256, ref.SHA256)
	}
	ref.SHA256 = strings.ToLower(ref.SHA256)
	return ref, true, nil
}

// MismatchError says that the stored object is not the payload the
// reference describes: its size or its SHA-256 differs (the object was
// replaced or damaged). Retrying does not help; the message belongs in the
// consumer's dead letters.
type MismatchError struct {
	Bucket, Key           string
	WantSize, GotSize     int64 // GotSize is WantSize+1 when the object is longer
	WantSHA256, GotSHA256 string
}

func (e *MismatchError) Error() string {
	if e.WantSize != e.GotSize {
		return fmt.Sprintf("heraldclaim: object %s/%s has %d bytes, the reference says %d", e.Bucket, e.Key, e.GotSize, e.WantSize)
	}
	return fmt.Sprintf("heraldclaim: object %s/%s has SHA-256 %s, the reference says %s", e.Bucket, e.Key, e.GotSHA256, e.WantSHA256)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// Resolve returns m with its payload fetched from store when m carries a
// claim check, checked against the reference's size and SHA-256, and the
// claim-check headers removed; m as it is otherwise. m is what a
// publisher package's Parse returned:
//
//	m, err := heraldaws.Parse(msg)
//	...
//	m, err = heraldclaim.Resolve(ctx, store, m)
//
// A reference to another bucket than store's is an error; a payload that
// does not match is a *MismatchError; a missing object wraps ErrNotFound.
func Resolve(ctx context.Context, store ObjectStore, m herald.Message) (herald.Message, error) {
	ref, ok, err := RefOf(m.Headers)
	if err != nil || !ok {
		return m, err
	}
	if ref.Bucket != store.Bucket() {
		return m, fmt.Errorf("heraldclaim: event %s refers to bucket %q, the store reads %q", m.ID, ref.Bucket, store.Bucket())
	}
	r, err := store.Get(ctx, ref.Key)
	if err != nil {
		return m, fmt.Errorf("heraldclaim: fetching the payload of event %s from %s/%s: %w", m.ID, ref.Bucket, ref.Key, err)
	}
	defer r.Close()
	// One byte more than the reference says, to see a longer object
	// without reading all of it.
	body, err := io.ReadAll(io.LimitReader(r, ref.Size+1))
	if err != nil {
		return m, fmt.Errorf("heraldclaim: reading the payload of event %s from %s/%s: %w", m.ID, ref.Bucket, ref.Key, err)
	}
	sum := sha256.Sum256(body)
	got := hex.EncodeToString(sum[:])
	if int64(len(body)) != ref.Size || got != ref.SHA256 {
		return m, &MismatchError{Bucket: ref.Bucket, Key: ref.Key, WantSize: ref.Size, GotSize: int64(len(body)),
			WantSHA256: ref.SHA256, GotSHA256: got}
	}
	out := m
	out.Payload = body
	out.Headers = nil
	for name, v := range m.Headers {
		if isClaimHeader(name) {
			continue
		}
		if out.Headers == nil {
			out.Headers = make(map[string]string, len(m.Headers))
		}
		out.Headers[name] = v
	}
	return out, nil
}

// MemoryStore is an ObjectStore in memory, for tests.
type MemoryStore struct {
	bucket string
	mu     sync.Mutex
	objs   map[string]memObject
	puts   map[string]int
}

type memObject struct {
	body        []byte
	contentType string
}

// NewMemoryStore returns an empty MemoryStore of the named bucket.
func NewMemoryStore(bucket string) *MemoryStore {
	return &MemoryStore{bucket: bucket, objs: map[string]memObject{}, puts: map[string]int{}}
}

// Bucket returns the bucket name.
func (s *MemoryStore) Bucket() string { return s.bucket }

// Put stores a copy of body.
func (s *MemoryStore) Put(ctx context.Context, key string, body []byte, contentType string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs[key] = memObject{bytes.Clone(body), contentType}
	s.puts[key]++
	return nil
}

// Get returns the object under key.
func (s *MemoryStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", s.bucket, key, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(o.body)), nil
}

// Keys returns the keys of the stored objects, and how many times each
// was written, for a test's assertions.
func (s *MemoryStore) Keys() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.puts))
	for k, n := range s.puts {
		out[k] = n
	}
	return out
}
