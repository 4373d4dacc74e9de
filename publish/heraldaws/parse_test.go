package heraldaws_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Parse reads back, field for field, any event a Writer accepts from the
// message Publish builds for it, whether SQS delivers it as sent or SNS
// wraps it in a notification; and the message keeps within SQS's and
// SNS's 10 attributes and sends as text what SQS accepts as text.
func FuzzParseRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, _ string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok {
			return
		}
		for _, dest := range []string{"https://sqs.eu-west-1.amazonaws.com/123456789012/q", "arn:aws:sns:eu-west-1:123456789012:t.fifo"} {
			msg, notification, attrs, err := heraldaws.Delivered(&env, dest)
			if len(payload) > heraldaws.DefaultMaxMessageBytes*3/4 {
				// Base64 or attributes may push it over the limit.
				if err != nil {
					require.True(t, herald.IsPermanent(err))
					return
				}
			}
			require.NoError(t, err)
			require.LessOrEqual(t, attrs, 10, "SQS and SNS take at most 10 attributes")
			require.NotEmpty(t, aws.ToString(msg.Body), "SQS and SNS refuse an empty body")
			for name, v := range msg.MessageAttributes {
				if aws.ToString(v.DataType) == "String" {
					require.Truef(t, sqsText(aws.ToString(v.StringValue)), "attribute %s: a String SQS refuses", name)
					require.NotEmpty(t, aws.ToString(v.StringValue), "attribute %s: empty", name)
				}
			}
			require.True(t, sqsText(aws.ToString(msg.Body)), "a body SQS refuses")

			want := env.Message
			if want.Payload == nil {
				want.Payload = []byte{}
			}
			got, err := heraldaws.Parse(msg)
			require.NoError(t, err)
			require.Equal(t, want, got, "as sent")
			got, err = heraldaws.Parse(types.Message{Body: aws.String(string(notification))})
			require.NoError(t, err)
			require.Equal(t, want, got, "in an SNS notification")
			got, err = heraldaws.ParseNotification(notification)
			require.NoError(t, err)
			require.Equal(t, want, got, "ParseNotification")
		}
	})
}

// sqsText reports whether SQS takes s as text, as its documentation lists
// the characters: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD |
// #x10000 to #x10FFFF.
func sqsText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		ok := r == 0x9 || r == 0xA || r == 0xD || (r >= 0x20 && r <= 0xD7FF) ||
			(r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
		if !ok {
			return false
		}
	}
	return true
}

// Whatever a message holds, Parse takes it only with a UUID in Herald-Id,
// hands back only headers a producer may set, and never panics.
func FuzzParseAnyMessage(f *testing.F) {
	id := "0190d5a3-7c1e-7b4a-9f00-0123456789ab"
	f.Add(id, "body", "", `{"X-Tenant":"acme"}`, false)
	f.Add(id, "AAH/", "base64", `{"Herald-Key":"forged","CC":"x"}`, true)
	f.Add(id, "-", "empty", `[1,2]`, false)
	f.Add(id, "not base64!", "base64", "", false)
	f.Add("not-a-uuid", "x", "", "", false)
	f.Add(id, `{"Type":"Notification","Message":"m","MessageAttributes":{"Herald-Id":{"Type":"String","Value":"`+id+`"}}}`, "gzip", "", false)
	f.Fuzz(func(t *testing.T, eventID, body, encoding, headers string, binary bool) {
		attrs := map[string]types.MessageAttributeValue{}
		set := func(name, v string) {
			if v == "" {
				return
			}
			if binary {
				attrs[name] = types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte(v)}
				return
			}
			attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
		set(herald.HeaderID, eventID)
		set(heraldaws.AttrEncoding, encoding)
		set(heraldaws.AttrHeaders, headers)
		for _, msg := range []types.Message{
			{Body: aws.String(body), MessageAttributes: attrs},
			{Body: aws.String(body)}, // perhaps an SNS notification
		} {
			got, err := heraldaws.Parse(msg)
			if err != nil {
				continue
			}
			_, err = uuid.Parse(got.ID)
			require.NoError(t, err, "took %q as an event id", got.ID)
			require.NotNil(t, got.Payload)
			for name := range got.Headers {
				require.NoError(t, herald.ValidateHeaderName(name), "header %q handed back", name)
			}
		}
	})
}

func TestParseRefusesWhatHeraldDidNotSend(t *testing.T) {
	t.Parallel()
	for name, msg := range map[string]types.Message{
		"NoAttributes": {Body: aws.String("hello")},
		"IDNotAUUID": {Body: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{
			herald.HeaderID: {DataType: aws.String("String"), StringValue: aws.String("42")},
		}},
		"NotificationWithoutHeraldID": {Body: aws.String(`{"Type":"Notification","Message":"m","MessageAttributes":{}}`)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := heraldaws.Parse(msg)
			require.ErrorIs(t, err, heraldaws.ErrNotHerald)
		})
	}
	_, err := heraldaws.ParseNotification([]byte(`{"Type":"SubscriptionConfirmation"}`))
	require.ErrorIs(t, err, heraldaws.ErrNotHerald)
}

// An event that uses every attribute (every field, both versions, a
// producer header, a payload that needs base64) keeps within SQS's and
// SNS's 10 attributes and reads back field for field.
func TestEveryFieldAndBothVersionsKeepWithinTenAttributes(t *testing.T) {
	t.Parallel()
	env := herald.Envelope{Message: herald.Message{
		ID: herald.NewID(), Topic: "orders", Key: "order-42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: herald.MaxEventVersion, AggregateVersion: 1<<63 - 1,
		Payload: []byte{0, 0xff}, Headers: map[string]string{"X-Tenant": "acme"},
	}, Attempt: 1}
	msg, notification, attrs, err := heraldaws.Delivered(&env, "https://sqs.eu-west-1.amazonaws.com/123456789012/q")
	require.NoError(t, err)
	require.Equal(t, 10, attrs)
	require.Equal(t, "2147483647", aws.ToString(msg.MessageAttributes[herald.HeaderEventVersion].StringValue))
	require.Equal(t, "9223372036854775807", aws.ToString(msg.MessageAttributes[herald.HeaderAggregateVersion].StringValue))
	got, err := heraldaws.Parse(msg)
	require.NoError(t, err)
	require.Equal(t, env.Message, got)
	got, err = heraldaws.ParseNotification(notification)
	require.NoError(t, err)
	require.Equal(t, env.Message, got)
}

// A version attribute that is not a version in range is an error naming
// it, not version 1 or none, in an SQS message as in an SNS notification.
func TestParseRefusesMalformedVersions(t *testing.T) {
	t.Parallel()
	for _, a := range []struct{ name, value string }{
		{herald.HeaderEventVersion, "v2"},
		{herald.HeaderEventVersion, "0"},
		{herald.HeaderEventVersion, "2147483648"},
		{herald.HeaderAggregateVersion, "-1"},
		{herald.HeaderAggregateVersion, "42.0"},
	} {
		id := herald.NewID()
		msg := types.Message{Body: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{
			herald.HeaderID: {DataType: aws.String("String"), StringValue: aws.String(id)},
			a.name:          {DataType: aws.String("String"), StringValue: aws.String(a.value)},
		}}
		_, err := heraldaws.Parse(msg)
		require.ErrorContains(t, err, "heraldaws: event "+id, "%s: %q", a.name, a.value)
		require.ErrorContains(t, err, a.name)

		notification := `{"Type":"Notification","Message":"x","MessageAttributes":{` +
			`"Herald-Id":{"Type":"String","Value":"` + id + `"},"` + a.name + `":{"Type":"String","Value":"` + a.value + `"}}}`
		_, err = heraldaws.ParseNotification([]byte(notification))
		require.ErrorContains(t, err, a.name, "in a notification")
	}
}

// The payload travels as is when it is text, in base64 when it is not, and
// as a placeholder when empty; the key becomes the FIFO message group, or
// a hash of it when AWS would refuse it.
func TestPayloadEncodingAndGroupIDs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		payload  []byte
		body     string
		encoding string
	}{
		{"JSONAsIs", []byte(`{"id":42,"note":"caf\u00e9"}`), `{"id":42,"note":"caf\u00e9"}`, ""},
		{"TextWithLineBreaksAsIs", []byte("a\tb\r\nc "), "a\tb\r\nc ", ""},
		{"NULInBase64", []byte("a\x00b"), base64.StdEncoding.EncodeToString([]byte("a\x00b")), heraldaws.EncodingBase64},
		{"ControlCharacterInBase64", []byte("a\x01b"), base64.StdEncoding.EncodeToString([]byte("a\x01b")), heraldaws.EncodingBase64},
		{"BrokenUTF8InBase64", []byte{0xff, 'x'}, base64.StdEncoding.EncodeToString([]byte{0xff, 'x'}), heraldaws.EncodingBase64},
		{"NonCharacterInBase64", []byte("\uFFFE"), base64.StdEncoding.EncodeToString([]byte("\uFFFE")), heraldaws.EncodingBase64},
		{"EmptyAsPlaceholder", nil, "-", heraldaws.EncodingEmpty},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := herald.Envelope{Message: herald.Message{ID: uuid.NewString(), Topic: "t", Payload: c.payload}}
			msg, _, _, err := heraldaws.Delivered(&env, "https://sqs.eu-west-1.amazonaws.com/1/q")
			require.NoError(t, err)
			require.Equal(t, c.body, aws.ToString(msg.Body))
			require.Equal(t, c.encoding, aws.ToString(msg.MessageAttributes[heraldaws.AttrEncoding].StringValue))
		})
	}

	long := strings.Repeat("k", 129)
	for key, want := range map[string]string{
		"order-42":               "order-42",
		"":                       "herald-unkeyed",
		strings.Repeat("k", 128): strings.Repeat("k", 128),
	} {
		require.Equal(t, want, heraldaws.GroupID(key), "key %q", key)
	}
	for _, key := range []string{long, "with space", "caf\u00e9"} {
		g := heraldaws.GroupID(key)
		require.True(t, strings.HasPrefix(g, "herald-sha256-"), "key %q: group %q", key, g)
		require.Len(t, g, len("herald-sha256-")+64)
		require.Equal(t, g, heraldaws.GroupID(key), "the same key, the same group")
	}
	require.NotEqual(t, heraldaws.GroupID(long), heraldaws.GroupID(long+"x"))
}
