package heraldaws_test

import (
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/cetest"
	"github.com/herald-outbox/herald/publish/heraldaws"
)

// SQS and SNS have no CloudEvents binding (nor an sdk-go module): Herald
// sends the JSON event format as the body, and cetest hands body and
// content-type attribute to sdk-go's structured reader.
func ceMessage(body string, contentType string) cetest.Message {
	return cetest.Message{ContentType: contentType, Body: []byte(body)}
}

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	ce := &heraldce.Config{Source: "urn:shop:orders"}

	t.Run("SQSMessageIsReadByTheSDKAndParse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, freshName(true), nil)
		p := b.sqsPublisher(t, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(q), CloudEvents: ce})
		env := cetest.Envelope("orders")
		require.NoError(t, publish(t, p, []herald.Envelope{env}))

		msg := b.receive(t, q, 1)[0]
		require.NotContains(t, msg.MessageAttributes, herald.HeaderID)
		contentType := aws.ToString(msg.MessageAttributes[heraldaws.AttrContentType].StringValue)
		require.Equal(t, heraldce.StructuredContentType, contentType)
		require.JSONEq(t, `{"X-Tenant":"acme","traceparent":"`+cetest.Traceparent+`"}`,
			aws.ToString(msg.MessageAttributes[heraldaws.AttrHeaders].StringValue))
		require.Equal(t, "order-7", msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
			"the FIFO group stays the event's key")

		e, err := cetest.ToEvent(t.Context(), ceMessage(aws.ToString(msg.Body), contentType))
		require.NoError(t, err)
		cetest.Check(t, e, &env, "urn:shop:orders")

		back, err := heraldaws.Parse(msg)
		require.NoError(t, err)
		require.Equal(t, env.Message, back)
	})

	t.Run("SNSMessageIsReadWithAndWithoutRawDelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, raw := range []bool{false, true} {
			arn, q := b.topic(t, freshName(false), raw)
			p := b.snsPublisher(t, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed(arn), CloudEvents: ce})
			env := cetest.Envelope("orders")
			env.Payload = []byte{0, 1, 0xff} // not text: data_base64
			env.Headers["Content-Type"] = "application/octet-stream"
			require.NoError(t, publish(t, p, []herald.Envelope{env}))

			msg := b.receive(t, q, 1)[0]
			body := aws.ToString(msg.Body)
			if !raw {
				var n struct{ Message string }
				require.NoError(t, json.Unmarshal([]byte(body), &n))
				body = n.Message
			}
			e, err := cetest.ToEvent(t.Context(), ceMessage(body, heraldce.StructuredContentType))
			require.NoError(t, err)
			require.Equal(t, env.ID, e.ID())
			require.Equal(t, []byte{0, 1, 0xff}, e.Data())

			back, err := heraldaws.Parse(msg)
			require.NoError(t, err, "raw delivery %v", raw)
			require.Equal(t, env.Message, back, "raw delivery %v", raw)
		}
	})

	t.Run("BinaryModeIsRefused", func(t *testing.T) {
		t.Parallel()
		binary := &heraldce.Config{Source: "/s", Mode: heraldce.Binary}
		sqsClient, snsClient := unreachable(t)
		_, err := heraldaws.NewSQS(sqsClient, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("q"), CloudEvents: binary})
		require.ErrorContains(t, err, "heraldaws: SQSConfig.CloudEvents.Mode \"binary\": SQS and SNS take CloudEvents in structured mode only")
		_, err = heraldaws.NewSNS(snsClient, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed("t"), CloudEvents: &heraldce.Config{}})
		require.ErrorContains(t, err, "heraldaws: SNSConfig.CloudEvents.Source is required")
	})

	t.Run("ParseRefusesACloudEventHeraldDidNotSend", func(t *testing.T) {
		t.Parallel()
		_, err := heraldaws.Parse(types.Message{
			Body: aws.String(`{"specversion":"1.0","id":"42","source":"/s","type":"t"}`),
			MessageAttributes: map[string]types.MessageAttributeValue{
				heraldaws.AttrContentType: {DataType: aws.String("String"), StringValue: aws.String(heraldce.StructuredContentType)},
			},
		})
		require.ErrorIs(t, err, heraldaws.ErrNotHerald)
	})
}
