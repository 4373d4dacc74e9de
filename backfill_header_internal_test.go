package herald

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The Herald-Backfill mark: producers cannot set it, a stored row may
// carry it (a backfill wrote it), and every publisher sends it.
func TestBackfillHeaderIsHeraldsOwn(t *testing.T) {
	m := Message{Topic: "t", Payload: []byte("{}"), Headers: map[string]string{HeaderBackfill: "orders-2026"}}
	_, err := Prepare([]Message{m}, 0)
	require.ErrorContains(t, err, `header name "Herald-Backfill" is reserved`)
	require.NoError(t, validateMessage(0, &m, 100, true), "a row a backfill wrote is valid")
	m.Headers[HeaderBackfill] = "bad\nname"
	require.ErrorContains(t, validateMessage(0, &m, 100, true), "contains CR or LF")
	m.Headers = map[string]string{HeaderBackfill: "orders-2026", "Nats-Msg-Id": "x"}
	require.Error(t, validateMessage(0, &m, 100, true), "other reserved names stay refused")

	got := map[string]string{}
	EventHeaders(&Envelope{Message: Message{ID: NewID(), Topic: "t", Headers: map[string]string{HeaderBackfill: "orders-2026"}}},
		func(name, value string) { got[name] = value })
	require.Equal(t, "orders-2026", got[HeaderBackfill])
}
