package heraldaws

import (
	"context"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// sendFunc sends msgs, all to dest, in one batch request (SendMessageBatch
// or PublishBatch), the entry of msgs[j] having the id strconv.Itoa(j).
// It returns the request's error, or else AWS's answer per entry.
type sendFunc func(ctx context.Context, dest string, msgs []*message) (answer, error)

// answer is AWS's answer to a batch request: the ids of the entries it
// accepted and those it refused.
type answer struct {
	accepted []string
	refused  []refusal
}

// refusal is one entry AWS refused (a BatchResultErrorEntry).
type refusal struct {
	id, code, msg string
	senderFault   bool
}

// accept records an entry AWS accepted, from its result entry's Id.
func (a *answer) accept(id *string) { a.accepted = append(a.accepted, aws.ToString(id)) }

// refuse records an entry AWS refused, from its BatchResultErrorEntry's
// fields.
func (a *answer) refuse(id, code, msg *string, senderFault bool) {
	a.refused = append(a.refused, refusal{
		id: aws.ToString(id), code: aws.ToString(code), msg: aws.ToString(msg), senderFault: senderFault,
	})
}

// entry is a message as both batch requests take it: the fields that
// SendMessageBatchRequestEntry and PublishBatchRequestEntry share, V being
// each SDK's own MessageAttributeValue. The sqs and sns packages declare
// alike types of their own, so each service copies an entry field by
// field.
type entry[V any] struct {
	id, body     *string
	attrs        map[string]V
	group, dedup *string // nil for a standard queue or topic
}

// entries turns msgs into the entries of one batch request, the entry of
// msgs[j] having the id strconv.Itoa(j) (see sendFunc); value makes the
// service's MessageAttributeValue from its fields.
func entries[V any](msgs []*message, value func(dataType, str *string, bin []byte) V) []entry[V] {
	out := make([]entry[V], len(msgs))
	for j, m := range msgs {
		e := entry[V]{id: aws.String(strconv.Itoa(j)), body: aws.String(m.body), attrs: attributeValues(m.attrs, value)}
		if m.group != "" {
			e.group, e.dedup = aws.String(m.group), aws.String(m.dedup)
		}
		out[j] = e
	}
	return out
}

// attributeValues maps attrs onto a service's MessageAttributeValue: a
// String carries StringValue, a Binary BinaryValue.
func attributeValues[V any](attrs []attribute, value func(dataType, str *string, bin []byte) V) map[string]V {
	out := make(map[string]V, len(attrs))
	for _, a := range attrs {
		if a.binary {
			out[a.name] = value(aws.String(a.dataType()), nil, []byte(a.value))
		} else {
			out[a.name] = value(aws.String(a.dataType()), aws.String(a.value), nil)
		}
	}
	return out
}
