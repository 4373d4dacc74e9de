package heraldmqtt_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

// Each PUBACK reason code of 0x80 and above reaches the relay as the
// specification's meaning asks: overload costs no attempt, what no retry
// can fix goes to the dead letters, the rest is retried.
func TestReasonCodesMapToTheRelaysOutcomes(t *testing.T) {
	t.Parallel()
	const (
		unavailable = "unavailable"
		permanent   = "permanent"
		retried     = "retried"
	)
	for code, want := range map[byte]string{
		heraldmqtt.ReasonQuotaExceeded:        unavailable,
		heraldmqtt.ReasonServerBusy:           unavailable,
		heraldmqtt.ReasonNotAuthorized:        permanent,
		heraldmqtt.ReasonTopicNameInvalid:     permanent,
		heraldmqtt.ReasonPayloadFormatInvalid: permanent,
		heraldmqtt.ReasonPacketTooLarge:       permanent,
		heraldmqtt.ReasonUnspecifiedError:     retried,
		heraldmqtt.ReasonImplementationError:  retried,
		heraldmqtt.ReasonPacketIDInUse:        retried,
		0xa0:                                  retried, // not a PUBACK code at all
	} {
		err := heraldmqtt.Refused(code)
		require.Equal(t, code, reasonCode(t, err))
		got := retried
		switch {
		case herald.IsUnavailable(err):
			got = unavailable
		case herald.IsPermanent(err):
			got = permanent
		}
		require.Equalf(t, want, got, "reason code 0x%02x: %v", code, err)
	}
}
