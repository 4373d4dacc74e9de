package heraldkafka

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
)

// levelTrace is the slog level of franz-go's debug lines, below slog's
// Debug: they trace every request the client writes and reads, too many
// for a relay's debug log, so a handler shows them only when set to
// slog.LevelDebug-4 or lower.
const levelTrace = slog.LevelDebug - 4

// Logger returns a franz-go logger that writes to log, for
// kgo.WithLogger: a client's connection failures and retries then reach
// the same log as the publisher's, in its format. franz-go's errors and
// warnings keep their level, its info lines are Debug and its debug lines,
// one per request, slog.LevelDebug-4, below what a handler set to Debug
// shows; every line carries lib=franz-go, keys are snake_case ("err"
// becomes "error") and text is passed through herald.Scrub. The client
// asks for the levels log's handler is enabled at.
func Logger(log *slog.Logger) kgo.Logger {
	return kgoLogger{log: log.With("lib", "franz-go")}
}

type kgoLogger struct{ log *slog.Logger }

// slogLevel maps franz-go's levels to slog's, from the most verbose.
var slogLevel = [...]struct {
	kgo  kgo.LogLevel
	slog slog.Level
}{
	{kgo.LogLevelDebug, levelTrace},
	{kgo.LogLevelInfo, slog.LevelDebug},
	{kgo.LogLevelWarn, slog.LevelWarn},
	{kgo.LogLevelError, slog.LevelError},
}

func (l kgoLogger) Level() kgo.LogLevel {
	for _, m := range slogLevel {
		if l.log.Enabled(context.Background(), m.slog) {
			return m.kgo
		}
	}
	return kgo.LogLevelNone
}

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelError
	for _, m := range slogLevel {
		if m.kgo == level {
			lvl = m.slog
		}
	}
	if !l.log.Enabled(context.Background(), lvl) {
		return
	}
	args := make([]any, 0, len(keyvals)+1)
	for i := 0; i+1 < len(keyvals); i += 2 {
		args = append(args, snakeKey(fmt.Sprint(keyvals[i])), scrubValue(keyvals[i+1]))
	}
	if len(keyvals)%2 == 1 {
		args = append(args, "extra", scrubValue(keyvals[len(keyvals)-1]))
	}
	l.log.Log(context.Background(), lvl, herald.Scrub(msg), args...)
}

// snakeKey spells a franz-go key in snake_case, as Herald's logs do.
func snakeKey(k string) string {
	if k == "err" {
		return "error"
	}
	var b strings.Builder
	for i, r := range k {
		switch {
		case r == ' ' || r == '-' || r == '.':
			b.WriteByte('_')
		case 'A' <= r && r <= 'Z':
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r + 'a' - 'A')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// scrubValue scrubs the values that may hold a broker's URL or a
// credential: text and errors.
func scrubValue(v any) any {
	switch v := v.(type) {
	case error:
		return herald.Scrub(v.Error())
	case string:
		return herald.Scrub(v)
	case fmt.Stringer:
		return herald.Scrub(v.String())
	}
	return v
}
