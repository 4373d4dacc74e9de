package herald

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An event a Source marked unreadable is refused permanently (so that it
// is dead and parks its key), with the marker's name alone as the reason;
// other headers, however odd, are left to the validation.
func TestAnUnreadableMarkIsAPermanentRefusalWithItsReason(t *testing.T) {
	err := unreadable(&Message{Headers: map[string]string{"a": "b", UnreadableHeader + "row: column headers: bad": ""}})
	require.EqualError(t, err, "herald: unreadable row: column headers: bad")
	require.True(t, IsPermanent(err))

	require.NoError(t, unreadable(&Message{Headers: map[string]string{"herald: readable": "", "x y": ""}}))
	require.NoError(t, unreadable(&Message{}))
}
