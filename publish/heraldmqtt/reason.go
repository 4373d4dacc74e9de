package heraldmqtt

import (
	"fmt"

	"github.com/herald-outbox/herald"
)

// PUBACK reason codes Publish acts on (MQTT 5, section 3.4.2.1), and the
// two that brokers send in a DISCONNECT but that some also put in a PUBACK.
const (
	ReasonNoMatchingSubscribers = 0x10
	ReasonUnspecifiedError      = 0x80
	ReasonImplementationError   = 0x83
	ReasonNotAuthorized         = 0x87
	ReasonServerBusy            = 0x89
	ReasonTopicNameInvalid      = 0x90
	ReasonPacketIDInUse         = 0x91
	ReasonPacketTooLarge        = 0x95
	ReasonQuotaExceeded         = 0x97
	ReasonPayloadFormatInvalid  = 0x99
)

// ReasonError is a PUBACK that failed an event: its reason code (0x80 or
// above, or 0x10 with Config.RequireSubscribers) and the reason string the
// broker gave, if any. Publish reports it to the relay as the code asks:
//
//   - Quota exceeded (0x97) and Server busy (0x89) say the broker is
//     overloaded: wrapped with herald.Unavailable, retried after a pause
//     without spending an attempt;
//   - Not authorized (0x87), Topic Name invalid (0x90), Payload format
//     invalid (0x99) and Packet too large (0x95) say the event itself
//     cannot be taken, on every retry: wrapped with herald.Permanent, to
//     the dead letters at once;
//   - any other code is an ordinary failure, retried per the retry policy.
type ReasonError struct {
	EventID string
	Topic   string // the MQTT topic name
	Code    byte
	Reason  string
}

func (e *ReasonError) Error() string {
	s := fmt.Sprintf("heraldmqtt: event %s (topic %q): PUBACK reason code 0x%02x %s", e.EventID, e.Topic, e.Code, reasonName(e.Code))
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// refused returns the error an event's refusal is reported with (see
// ReasonError).
func refused(e *ReasonError) error {
	switch e.Code {
	case ReasonQuotaExceeded, ReasonServerBusy:
		return herald.Unavailable(e)
	case ReasonNotAuthorized, ReasonTopicNameInvalid, ReasonPayloadFormatInvalid, ReasonPacketTooLarge:
		return herald.Permanent(e)
	}
	return e
}

// reasonName names a reason code in the words of the MQTT specification.
func reasonName(code byte) string {
	switch code {
	case ReasonNoMatchingSubscribers:
		return "(No matching subscribers)"
	case ReasonUnspecifiedError:
		return "(Unspecified error)"
	case ReasonImplementationError:
		return "(Implementation specific error)"
	case ReasonNotAuthorized:
		return "(Not authorized)"
	case ReasonServerBusy:
		return "(Server busy)"
	case ReasonTopicNameInvalid:
		return "(Topic Name invalid)"
	case ReasonPacketIDInUse:
		return "(Packet Identifier in use)"
	case ReasonPacketTooLarge:
		return "(Packet too large)"
	case ReasonQuotaExceeded:
		return "(Quota exceeded)"
	case ReasonPayloadFormatInvalid:
		return "(Payload format invalid)"
	}
	return ""
}
