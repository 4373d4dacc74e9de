package heraldui_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldui"
)

func TestShownError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, stored, shown string
	}{
		{"AnOlderRelaysInvalidRowLosesItsBatchIndex",
			"permanent: invalid row: herald: message 15: topic: contains whitespace or a control character",
			"permanent: invalid row: topic: contains whitespace or a control character"},
		{"AValidationErrorAloneLosesItToo",
			"herald: message 0: headers[X-A]: not a valid header name",
			"headers[X-A]: not a valid header name"},
		{"TheNewTextIsKept",
			"permanent: invalid row: topic: contains whitespace or a control character",
			"permanent: invalid row: topic: contains whitespace or a control character"},
		{"ABrokersOwnMessageNumberIsKept",
			"kafka: message 15: MESSAGE_TOO_LARGE",
			"kafka: message 15: MESSAGE_TOO_LARGE"},
		{"OnlyAtTheStartOrAfterAColon",
			"webhook said: see herald: message 3: ok",
			"webhook said: see herald: message 3: ok"},
		{"StillScrubbed",
			"invalid row: herald: message 4: topic: bad, token=tok-9f8e7d",
			"invalid row: topic: bad, token=xxxxx"},
		{"StillOnOneLine",
			"invalid row: herald: message 4: topic: a\nb",
			`invalid row: topic: a\x0ab`},
		{"Empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.shown, heraldui.ShownError(tc.stored))
		})
	}
}
