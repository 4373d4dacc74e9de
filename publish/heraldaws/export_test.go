package heraldaws

import (
	"encoding/base64"
	"encoding/json"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/herald-outbox/herald"
)

// GroupID exposes the MessageGroupId of a key.
var GroupID = groupID

// Delivered builds the message Publish sends for env to dest, with the
// default MaxMessageBytes, and returns it as SQS delivers it: as sent to a
// queue (or through SNS with raw message delivery), and as the JSON
// notification SNS delivers without raw message delivery. It also returns
// the number of attributes.
func Delivered(env *herald.Envelope, dest string) (types.Message, []byte, int, error) {
	m, err := buildMessage(env, 0, dest, DefaultMaxMessageBytes, nil)
	if err != nil {
		return types.Message{}, nil, 0, err
	}
	msg := types.Message{Body: aws.String(m.body), MessageAttributes: attributeValues(m.attrs, sqsValue)}
	type attr struct{ Type, Value string }
	n := struct {
		Type, MessageId, TopicArn, Message string
		MessageAttributes                  map[string]attr
	}{"Notification", "00000000-0000-0000-0000-000000000000", dest, m.body, map[string]attr{}}
	for _, a := range m.attrs {
		v := a.value
		if a.binary {
			v = base64.StdEncoding.EncodeToString([]byte(a.value))
		}
		n.MessageAttributes[a.name] = attr{a.dataType(), v}
	}
	notification, err := json.Marshal(n)
	return msg, notification, len(m.attrs), err
}
