// Package heraldaws publishes Herald events to Amazon SQS queues
// (SQSPublisher) and SNS topics (SNSPublisher), over clients of the AWS
// SDK for Go v2 that the caller configures.
//
// # The message
//
// Every event becomes one message. Its body is the payload, as is when it
// is text SQS accepts (valid UTF-8 without NUL or most control
// characters: JSON is), in standard base64 otherwise, with the attribute
// Herald-Encoding set to "base64". SQS and SNS refuse an empty body: an
// empty payload is sent as the body "-" with Herald-Encoding set to
// "empty".
//
// SQS and SNS allow 10 message attributes per message, with restricted
// names, and a producer may set 64 headers. So the event's fields travel
// as attributes of their own, named as herald.EventHeaders names them
// (Herald-Id, Herald-Topic, Herald-Type, Herald-Key, Herald-Aggregate-Type,
// Herald-Aggregate-Id, Herald-Event-Version, Herald-Aggregate-Version,
// each only when not empty), and all the producer's headers travel
// together as one JSON object of strings in the attribute Herald-Headers:
// with Herald-Encoding, at most 10 attributes. Herald-Id and
// Herald-Event-Version are always there. An
// attribute value SQS would not take as text is sent as a Binary attribute
// holding the same bytes. SNS subscription filter policies can match
// Herald-Type and Herald-Topic; they cannot see into Herald-Headers.
//
// # URL form
//
// Importing this package registers sqs:// and sns:// with package
// heraldspec (ParseURL, URLConfig):
//
//	sqs://QUEUE[?OPTIONS]
//	sqs://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE (a queue URL, https:// left out)
//	sns://TOPIC[?OPTIONS]
//
// Options, each optional: region (else AWS_REGION or the shared
// configuration), account (the queue's owner, or the topic's account;
// else the caller's own), endpoint (an http(s):// URL, for an emulator or
// a VPC endpoint), max_message_bytes, and claim_check=s3://BUCKET/PREFIX,
// claim_threshold and claim_endpoint for claim checks (an S3Store wrapped
// around the publisher with package heraldclaim: a payload above the
// threshold goes to the bucket first). Credentials come from the AWS
// credential chain (the environment, the shared files, a role), never
// from the URL. Open finds the queue's URL, or checks that the topic
// exists, before it returns.
//
// # CloudEvents
//
// With CloudEvents in SQSConfig or SNSConfig, every event is a CloudEvent
// in structured mode: the body is the event in the JSON event format (the
// payload as its data member when it is JSON, as data_base64 otherwise),
// the attribute content-type (AttrContentType) holds
// heraldce.StructuredContentType, and the producer's headers other than
// Content-Type stay in Herald-Headers; Herald-* attributes and
// Herald-Encoding are not sent, as the event's attributes carry the
// event's fields (see package heraldce). There is no binary mode: no
// CloudEvents binding exists for SQS or SNS, and 10 message attributes
// cannot hold the up to 12 attributes of an event one by one. FIFO groups
// and deduplication ids are as without CloudEvents.
//
// A consumer turns a received SQS message back into the event with Parse,
// whether an SQSPublisher sent it or an SNSPublisher published it to a
// topic the queue subscribes to (with or without raw message delivery);
// ParseNotification reads an SNS notification delivered over HTTP(S).
//
// # What counts as published
//
// Publish sends SendMessageBatch (SQS) or PublishBatch (SNS) requests of at
// most 10 entries and MaxMessageBytes in all, several at once, and reports
// an event published only once AWS listed its entry as successful: the
// message is stored in the queue, or accepted by the topic. A topic hands
// its messages on to its subscriptions afterwards; a topic without
// subscribers drops them.
//
//   - A message over MaxMessageBytes is reported with herald.Permanent
//     without being sent.
//   - An entry AWS refused is reported with its error code: herald.Permanent
//     when AWS refused its content (InvalidParameterValue,
//     InvalidMessageContents and the like); herald.Unavailable when AWS is
//     throttling (RequestThrottled, ThrottlingException, KmsThrottled,
//     KMSThrottling, ...) or failing on its side, which spends no attempt;
//     an ordinary, retried error otherwise (a KMS key disabled, say).
//   - A request AWS refused for its content as a whole (a batch over its
//     size limit, one message AWS found too long) is sent again one entry
//     per request, so that only the message at fault fails.
//   - A request that failed as a whole fails each of its events with that
//     error, marked herald.Unavailable when AWS throttled it, failed on its
//     side, refused the credentials, or could not be reached. When AWS
//     answered for no event of the batch, Publish returns a plain error,
//     which the relay takes as an outage.
//
// The SDK client's retryer (three attempts by default) retries throttled
// and failed requests before Publish sees them; a request it retried after
// a lost answer may store a message twice in a standard queue.
//
// # FIFO queues and topics, and duplicates
//
// A queue or topic whose name ends in ".fifo" is FIFO: each message's
// MessageGroupId is the event's key (a key AWS does not accept as a group
// id, over 128 bytes or with characters outside printable ASCII, is
// replaced by "herald-sha256-" and the hex SHA-256 of the key; events
// without a key share the group "herald-unkeyed"), and its
// MessageDeduplicationId is the event id, so that SQS and SNS drop an event
// the relay republishes within their five-minute deduplication interval.
// Standard queues and topics have no deduplication: consumers deduplicate
// on the event id, as Herald's inbox does.
//
// # Order per key
//
// Neither service stops a batch at an entry it refused: a later message of
// the same group in the same request would be stored after an earlier one
// failed. So Publish sends a batch in rounds with herald.SendInRounds, one
// event of each ordered key (herald.Envelope.Ordered) per round: a batch
// of many keys takes one round, and n ordered events of one key take n
// rounds. A key whose event failed is closed: its later events are
// reported with herald.ErrHeldBack without being sent. A FIFO queue or
// topic then keeps each key's events in order. A standard queue or topic
// orders nothing (its order is best effort): a relay publishing only to
// standard queues loses nothing by leaving its topics unordered, which lets
// every event go in the first round.
package heraldaws
