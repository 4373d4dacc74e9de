package heraldaws

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/smithy-go/logging"

	"github.com/herald-outbox/herald"
)

// Logger returns an AWS SDK logger that writes to log, for
// config.WithLogger or aws.Config.Logger. Without one, the SDK prints
// its warnings ("SDK 2026/01/02 15:04:05 WARN ...") to stderr itself.
// The SDK's WARN lines are Warn, its DEBUG lines (those that
// aws.ClientLogMode asks for, such as aws.LogRetries) are Debug, and every
// line carries lib=aws-sdk-go-v2, its text passed through herald.Scrub.
func Logger(log *slog.Logger) logging.Logger {
	return sdkLogger{log: log.With("lib", "aws-sdk-go-v2")}
}

type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(class logging.Classification, format string, v ...any) {
	level := slog.LevelInfo
	switch class {
	case logging.Warn:
		level = slog.LevelWarn
	case logging.Debug:
		level = slog.LevelDebug
	}
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, herald.Scrub(fmt.Sprintf(format, v...)))
}
