package heraldui

import (
	"net/http"
	"time"
)

// SetClock makes a handler New returned read the time from now, so that
// tests move time instead of sleeping. Call it before serving requests.
func SetClock(h http.Handler, now func() time.Time) { h.(*handler).now = now }

// ShownError is how the pages show a stored last error.
var ShownError = shownError
