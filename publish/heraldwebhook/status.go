package heraldwebhook

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StatusError is the error of a request the endpoint answered with a status
// other than 2xx.
//
// 408, 429 and 5xx are retryable: the relay schedules the event again. 3xx
// is retryable too, since redirects are not followed (update the endpoint's
// URL). Any other status (4xx) comes wrapped in herald.Permanent: the event
// goes to the dead letters.
type StatusError struct {
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Endpoint is the endpoint's origin (scheme://host:port). The path and
	// query are left out because they often carry credentials.
	Endpoint string
	// Topic is the event's topic.
	Topic string
	// RetryAfter is the delay the endpoint asked for in a Retry-After
	// header, in delay-seconds or HTTP-date form, on a retryable status; zero
	// when it sent none (or a date in the past). A relay that can schedule
	// per event should wait at least this long; see RetryAfter.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "heraldwebhook: endpoint %s of topic %q answered %d %s", e.Endpoint, e.Topic, e.StatusCode, http.StatusText(e.StatusCode))
	if e.StatusCode >= 300 && e.StatusCode < 400 {
		b.WriteString(" (redirects are not followed: update the endpoint's URL)")
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, "; retry after %s", e.RetryAfter)
	}
	return b.String()
}

// Retryable reports whether the status says a later attempt may succeed.
func (e *StatusError) Retryable() bool { return retryableStatus(e.StatusCode) }

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests ||
		code >= 500 || (code >= 300 && code < 400)
}

// RetryAfter returns the delay an endpoint asked for in its Retry-After
// header, found in err (a Publish error, a *herald.BatchError entry, or
// anything wrapping a *StatusError), and whether there was one.
func RetryAfter(err error) (time.Duration, bool) {
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		return se.RetryAfter, true
	}
	return 0, false
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP-date
// (RFC 9110, section 10.2.3). It returns 0 for a missing, malformed or past
// value.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		// Cap at a year so that a huge value cannot overflow.
		return time.Duration(min(secs, 366*24*3600)) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
