package herald

import (
	"errors"
)

// ErrRelayStopped is returned by Relay.Start after the relay was stopped.
var ErrRelayStopped = errors.New("herald: relay stopped")

// ErrNotFound is returned when an event looked up by id does not exist.
var ErrNotFound = errors.New("herald: not found")
