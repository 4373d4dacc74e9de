package heraldmqtt

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/autopaho"
	paholog "github.com/eclipse/paho.golang/paho/log"
	"github.com/stretchr/testify/require"
)

// The client's loggers left nil write to the publisher's logger: one JSON
// line per call, at the level of its kind, naming paho, a URL's password
// scrubbed; paho's per-packet debug lines stay below Debug. A logger the
// user set is kept.
func TestPahoLoggersWriteToThePublishersLogger(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-Pw-4417"
	url := "mqtt://herald:" + secret + "@127.0.0.1:1"
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mine := paholog.NOOPLogger{}
	client := autopaho.ClientConfig{PahoErrors: mine}
	setLibraryLoggers(&client, log)
	require.Equal(t, mine, client.PahoErrors, "the user's logger is kept")

	for _, tc := range []struct {
		name  string
		log   func()
		level string // "" when nothing shows at Debug
	}{
		{"Errors", func() { client.Errors.Printf("error publishing from queue: %s", errors.New("dial "+url)) }, "WARN"},
		{"Debug", func() { client.Debug.Println("mainLoop: connection to server lost (", url, "); will reconnect") }, "DEBUG"},
		{"PahoDebug", func() { client.PahoDebug.Printf("sending message to %s", url) }, ""},
	} {
		buf.Reset()
		tc.log()
		if tc.level == "" {
			require.Empty(t, buf.String(), tc.name)
			continue
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 1, tc.name)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &m), tc.name)
		require.Equal(t, tc.level, m["level"], tc.name)
		require.Equal(t, "paho.golang", m["lib"], tc.name)
		require.Contains(t, m["msg"], "herald:xxxxx@127.0.0.1:1", tc.name)
		require.NotContains(t, lines[0], secret, tc.name)
	}
}
