package heraldaws_test

import (
	"testing"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// tooLarge is over DefaultMaxMessageBytes: refused before sending.
const tooLarge = heraldaws.DefaultMaxMessageBytes + 1

// The shared publisher suite against moto_server, four ways: SQS standard
// and FIFO queues, and SNS standard and FIFO topics, each with a queue
// subscribed with raw message delivery, which Read drains.
//
// KeyOrder only for FIFO: standard queues and topics order nothing.
// Dedup only for FIFO: the event id is the MessageDeduplicationId.
// PermanentTooLarge: MaxMessageBytes is checked before sending. No Busy
// case: moto does not throttle (the throttling codes are mapped in
// TestThrottlingIsUnavailable and TestThrottledRequestFromTheSDK). Two
// more ways send CloudEvents, which Parse reads back.
func TestConformance(t *testing.T) {
	ce := &heraldce.Config{Source: "/conformance"}
	for _, c := range []struct {
		name         string
		viaSNS, fifo bool
		ce           *heraldce.Config
	}{
		{"SQSStandard", false, false, nil},
		{"SQSFIFO", false, true, nil},
		{"SNSStandard", true, false, nil},
		{"SNSFIFO", true, true, nil},
		{"SQSFIFOCloudEvents", false, true, ce},
		{"SNSStandardCloudEvents", true, false, ce},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			newPublisher := func(t *testing.T) herald.Publisher {
				if c.viaSNS {
					return b.snsPublisher(t, &heraldaws.SNSConfig{CloudEvents: c.ce})
				}
				return b.sqsPublisher(t, &heraldaws.SQSConfig{CloudEvents: c.ce})
			}
			publishertest.Run(t, publishertest.Harness{
				Features: publishertest.Features{KeyOrder: c.fifo, Headers: true, Dedup: c.fifo, PermanentTooLarge: true},
				New:      newPublisher,
				Topic:    func(t *testing.T) string { return b.addTopic(t, c.viaSNS, c.fifo) },
				Read:     b.readTopic,
				Unreachable: func(t *testing.T) herald.Publisher {
					sqsClient, snsClient := unreachable(t)
					if c.viaSNS {
						p, err := heraldaws.NewSNS(snsClient, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed("arn:aws:sns:eu-west-1:123456789012:none")})
						if err != nil {
							t.Fatal(err)
						}
						return p
					}
					p, err := heraldaws.NewSQS(sqsClient, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("http://127.0.0.1:1/123456789012/none")})
					if err != nil {
						t.Fatal(err)
					}
					return p
				},
				TooLarge: tooLarge,
			})
		})
	}
}
