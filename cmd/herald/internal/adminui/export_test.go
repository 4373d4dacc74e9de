package adminui

import (
	"net/http"
	"time"
)

// SetClock makes a handler New returned read the time from now, so that
// tests move time instead of sleeping. Call it before serving requests.
func SetClock(h http.Handler, now func() time.Time) { h.(*handler).now = now }

// SetRefresh makes the overview's script refresh it every d.
func SetRefresh(h http.Handler, d time.Duration) { h.(*handler).refresh = d }

// ShownError is how the pages show a stored last error.
var ShownError = shownError
