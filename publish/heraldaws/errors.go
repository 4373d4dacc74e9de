package heraldaws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/herald-outbox/herald"
)

// verdict is what an error from SQS or SNS means for the events it
// concerns.
type verdict int

const (
	// retried: an ordinary failure, which spends an attempt (a queue or
	// topic that does not exist, a KMS key that is disabled).
	retried verdict = iota
	// unavailable: AWS is throttling, failing on its side or refusing the
	// credentials; the event is not at fault and spends no attempt.
	unavailable
	// invalid: the request was refused for its content (a message too
	// long or with characters SQS refuses). For a request of one entry,
	// the event is at fault: permanent. A request of several entries is
	// sent again one entry per request to find which.
	invalid
)

// throttleCodes are the error codes of AWS slowing the caller down, on top
// of the SDK's retry.DefaultThrottleErrorCodes: the SQS, SNS and KMS ones
// (a queue or topic encrypted with KMS is limited by the key's quota too).
var throttleCodes = map[string]bool{
	"KmsThrottled": true, "KMS.ThrottlingException": true, // SQS
	"Throttled": true, "KMSThrottling": true, // SNS
	"AWS.SimpleQueueService.RequestThrottled": true,
	"ServiceUnavailable":                      true, "RequestTimeout": true,
}

// credentialCodes are the error codes of a request AWS refused for its
// credentials or permissions: configuration, which no event can fix.
var credentialCodes = map[string]bool{
	"AccessDenied": true, "AccessDeniedException": true, "AuthorizationError": true,
	"InvalidClientTokenId": true, "SignatureDoesNotMatch": true, "UnrecognizedClientException": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "InvalidSecurity": true,
	"MissingAuthenticationToken": true, "IncompleteSignature": true,
}

// invalidCodes are the error codes of a request refused for the content
// of its messages.
var invalidCodes = map[string]bool{
	"InvalidParameterValue": true, "InvalidParameter": true, "ParameterValueInvalid": true,
	"InvalidMessageContents": true, "ValidationException": true, "ValidationError": true,
	"BatchRequestTooLong": true, "AWS.SimpleQueueService.BatchRequestTooLong": true,
	"InvalidAttributeName": true, "InvalidAttributeValue": true, "MissingParameter": true,
}

// judgeCode is the verdict on an error code, whether it came for a whole
// request or for one entry of a batch. serverFault is AWS's word that
// the failure is on its side.
func judgeCode(code string, serverFault bool) verdict {
	_, sdkThrottle := retry.DefaultThrottleErrorCodes[code]
	switch {
	case sdkThrottle, throttleCodes[code], credentialCodes[code], serverFault:
		return unavailable
	case invalidCodes[code]:
		return invalid
	}
	return retried
}

// judge is the verdict on an error a whole request failed with.
func judge(err error) verdict {
	var quota ratelimit.QuotaExceededError
	if errors.As(err, &quota) {
		// The SDK's client-side retry budget ran out after repeated
		// failures: as good as a throttle.
		return unavailable
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		// No answer from AWS: a network failure, a DNS failure, a
		// timeout. The caller tells a cancelled context apart.
		return unavailable
	}
	return judgeCode(api.ErrorCode(), api.ErrorFault() == smithy.FaultServer)
}

// entryError is the error of one event that AWS refused in a batch
// response, marked as its verdict says.
func entryError(what, dest, id, code, msg string, senderFault bool) error {
	err := fmt.Errorf("heraldaws: %s %s refused event %s: %s: %s", what, dest, id, code, strings.TrimSpace(msg))
	switch judgeCode(code, !senderFault) {
	case unavailable:
		return herald.Unavailable(err)
	case invalid:
		return herald.Permanent(err)
	}
	return err
}
