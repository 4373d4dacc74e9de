package heraldpubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// Pub/Sub's limits on a message's attributes and ordering key, and on
// topic IDs.
const (
	maxAttributes      = 100
	maxAttributeKeyLen = 256
	maxAttributeValLen = 1024
	maxOrderingKeyLen  = 1024
	minTopicLen        = 3
	maxTopicLen        = 255
	reservedGoogPrefix = "goog"
	// contentTypeAttr is the attribute of the CloudEvents binding that
	// holds datacontenttype, or the event format's media type.
	contentTypeAttr = "Content-Type"
)

// message builds the Pub/Sub message of env and its topic ID, or the
// permanent error that keeps it from being sent.
func (p *Publisher) message(env *herald.Envelope) (*pubsub.Message, string, error) {
	fail := func(format string, args ...any) (*pubsub.Message, string, error) {
		return nil, "", herald.Permanent(fmt.Errorf("heraldpubsub: event %s: "+format, append([]any{env.ID}, args...)...))
	}
	topicID := p.prefix + env.Topic
	if reason := checkTopicID(topicID); reason != "" {
		return fail("topic ID %q %s", topicID, reason)
	}
	data := env.Payload
	attrs, err := p.attributes(env, &data)
	if err != nil {
		return fail("%v", err)
	}
	msg := &pubsub.Message{Data: data, Attributes: attrs}
	if env.Ordered && env.Key != "" {
		if len(env.Key) > maxOrderingKeyLen {
			return fail("key of %d bytes is over Pub/Sub's ordering key limit of %d", len(env.Key), maxOrderingKeyLen)
		}
		msg.OrderingKey = env.Key
	}
	// The size the client itself counts against its request limit.
	size := proto.Size(&pb.PubsubMessage{Data: msg.Data, Attributes: msg.Attributes, OrderingKey: msg.OrderingKey})
	if size > p.maxBytes {
		return fail("message of %d bytes (payload and attributes) is over the limit of %d (Config.MaxMessageBytes)", size, p.maxBytes)
	}
	return msg, topicID, nil
}

// attributes returns the message attributes of env, as herald.EventHeaders
// maps them, or why Pub/Sub would refuse them. A reserved header name in a
// row inserted with plain SQL (which a Writer would have refused) is
// dropped and logged. With CloudEvents on, they are the producer's headers
// and the event's CloudEvents attributes, and data becomes the structured
// event in structured mode.
func (p *Publisher) attributes(env *herald.Envelope, data *[]byte) (map[string]string, error) {
	for name := range env.Headers {
		if herald.ValidateHeaderName(name) != nil {
			p.log.Warn("dropped a reserved header", "event_id", env.ID, "header", name)
		}
	}
	attrs := make(map[string]string, len(env.Headers)+12)
	var err error
	set := func(name, v string) {
		switch {
		case err != nil:
		case strings.HasPrefix(name, reservedGoogPrefix):
			err = fmt.Errorf("header %q: Pub/Sub reserves attribute names starting with %q", name, reservedGoogPrefix)
		case len(name) > maxAttributeKeyLen:
			err = fmt.Errorf("header name of %d bytes is over Pub/Sub's attribute name limit of %d", len(name), maxAttributeKeyLen)
		case len(v) > maxAttributeValLen:
			err = fmt.Errorf("header %q: value of %d bytes is over Pub/Sub's attribute value limit of %d", name, len(v), maxAttributeValLen)
		}
		attrs[name] = v
	}
	switch {
	case p.ce == nil:
		herald.EventHeaders(env, set)
	case p.ce.ModeOr(heraldce.Binary) == heraldce.Structured:
		heraldce.ProducerHeaders(env, set)
		set(contentTypeAttr, heraldce.StructuredContentType)
		*data = p.ce.Structured(env)
	default:
		heraldce.ProducerHeaders(env, set)
		if ct := p.ce.Binary(env, heraldce.PrefixPubSub, set); ct != "" {
			set(contentTypeAttr, ct)
		}
	}
	if err == nil && len(attrs) > maxAttributes {
		err = fmt.Errorf("%d attributes, over Pub/Sub's limit of %d", len(attrs), maxAttributes)
	}
	return attrs, err
}

// checkTopicID returns why Pub/Sub would refuse s as a topic ID, or "".
func checkTopicID(s string) string {
	switch {
	case len(s) < minTopicLen:
		return fmt.Sprintf("is shorter than %d characters", minTopicLen)
	case len(s) > maxTopicLen:
		return fmt.Sprintf("is longer than %d characters", maxTopicLen)
	case !isLetter(s[0]):
		return "does not start with a letter"
	case strings.HasPrefix(s, reservedGoogPrefix):
		return fmt.Sprintf("starts with %q, which Pub/Sub reserves", reservedGoogPrefix)
	}
	for _, c := range s {
		if !isTopicChar(c) {
			return "has a character other than ASCII letters, digits and - _ . ~ + %"
		}
	}
	return ""
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// CheckTopicPrefix reports whether prefix can begin Pub/Sub topic IDs
// (Config.TopicPrefix): ASCII letters, digits and - _ . ~ + %, shorter than
// a topic ID's limit.
func CheckTopicPrefix(prefix string) error {
	for _, ch := range prefix {
		if !isTopicChar(ch) {
			return fmt.Errorf("%q has a character other than ASCII letters, digits and - _ . ~ + %%", prefix)
		}
	}
	if len(prefix) >= maxTopicLen {
		return fmt.Errorf("is longer than %d bytes", maxTopicLen-1)
	}
	return nil
}

func isTopicChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.~+%", c)
}

// classify wraps the client's error for one event, and reports whether it
// is the service's answer about the event or its topic (as opposed to the
// service being unreachable, overloaded or refusing the caller).
func classify(env *herald.Envelope, project, topicID string, err error) (error, bool) {
	wrap := func(format string, args ...any) error {
		return fmt.Errorf("heraldpubsub: event %s to topic %q: "+format+": %w",
			append(append([]any{env.ID, topicID}, args...), err)...)
	}
	var paused pubsub.ErrPublishingPaused
	switch {
	case errors.Is(err, pubsub.ErrOversizedMessage):
		return herald.Permanent(wrap("too large for a publish request")), true
	case errors.As(err, &paused):
		// The key failed in an earlier Publish whose messages are still
		// in flight; it is resumed once they are answered.
		return herald.Unavailable(wrap("ordering key paused after an earlier failure")), false
	case errors.Is(err, pubsub.ErrFlowControllerMaxOutstandingMessages),
		errors.Is(err, pubsub.ErrFlowControllerMaxOutstandingBytes):
		return herald.Unavailable(wrap("client flow control")), false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wrap("no answer within Config.Timeout"), false
	}
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return herald.Unavailable(wrap("throttled")), false
	case codes.Unavailable:
		return herald.Unavailable(wrap("service unavailable")), false
	case codes.Unauthenticated:
		return herald.Unavailable(wrap("credentials refused")), false
	case codes.PermissionDenied:
		return herald.Unavailable(wrap("the credentials may not publish to it (role roles/pubsub.publisher)")), false
	case codes.DeadlineExceeded:
		return wrap("no answer within Config.Timeout"), false
	case codes.NotFound:
		return fmt.Errorf("heraldpubsub: event %s: topic %q does not exist in project %q: create it, or fix the topic mapping (the topic prefix and the project): %w",
			env.ID, topicID, project, err), true
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return wrap("refused"), true
	}
	return wrap("publishing"), false
}
