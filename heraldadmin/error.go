package heraldadmin

import (
	"errors"
	"fmt"
)

// ErrNotFound is returned when an event looked up by id does not exist.
var ErrNotFound = errors.New("heraldadmin: event not found")

// ParkedError is returned by DiscardDead when the selection holds dead
// events that park their key with events waiting behind them and Resume
// was not set: discarding them lets those events go on, which the operator
// must ask for.
type ParkedError struct {
	Keys []BlockedKey
}

func (e *ParkedError) Error() string {
	if len(e.Keys) == 0 {
		return "heraldadmin: dead events park their keys; discarding them lets the waiting events go on: ask for that explicitly (resume)"
	}
	k := e.Keys[0]
	more := ""
	if len(e.Keys) > 1 {
		more = fmt.Sprintf(" (and %d more keys)", len(e.Keys)-1)
	}
	return fmt.Sprintf("heraldadmin: dead event %s parks key %q of topic %q with %d events waiting%s; "+
		"discarding it lets them go on: ask for that explicitly (resume)", k.EventID, k.Key, k.Topic, k.Waiting, more)
}
