package heraldmqtt

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/eclipse/paho.golang/autopaho"
	paholog "github.com/eclipse/paho.golang/paho/log"

	"github.com/herald-outbox/herald"
)

// levelTrace is the slog level of paho's own debug lines, below slog's
// Debug: they trace every packet ("sending message to orders"), too many
// for a relay's debug log.
const levelTrace = slog.LevelDebug - 4

// setLibraryLoggers gives the loggers of client that the user left nil to
// log: autopaho's debug lines at Debug, paho's at slog.LevelDebug-4, the
// errors of both at Warn, each with lib=paho.golang and its text passed
// through herald.Scrub. autopaho's default logs nothing, and would hide
// why a connection keeps failing.
func setLibraryLoggers(client *autopaho.ClientConfig, log *slog.Logger) {
	log = log.With("lib", "paho.golang")
	for _, l := range []struct {
		logger *paholog.Logger
		level  slog.Level
	}{
		{&client.Debug, slog.LevelDebug},
		{&client.Errors, slog.LevelWarn},
		{&client.PahoDebug, levelTrace},
		{&client.PahoErrors, slog.LevelWarn},
	} {
		if *l.logger == nil {
			*l.logger = pahoLogger{log: log, level: l.level}
		}
	}
}

// pahoLogger is a paho log.Logger that writes to an slog.Logger at one
// level.
type pahoLogger struct {
	log   *slog.Logger
	level slog.Level
}

func (l pahoLogger) Println(v ...any) {
	if l.log.Enabled(context.Background(), l.level) {
		l.write(strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
	}
}

func (l pahoLogger) Printf(format string, v ...any) {
	if l.log.Enabled(context.Background(), l.level) {
		l.write(fmt.Sprintf(format, v...))
	}
}

func (l pahoLogger) write(msg string) {
	l.log.Log(context.Background(), l.level, herald.Scrub(strings.TrimSpace(msg)))
}
