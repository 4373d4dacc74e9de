package heraldspec

import (
	"fmt"
	"strings"

	"github.com/herald-outbox/herald"
)

// Error is a destination's spec refused: a URL part, an option or a
// secret that is wrong. It never quotes a secret.
type Error struct {
	Destination string // the destination's Name
	Err         error  // what is wrong, without the name
}

func (e *Error) Error() string { return "destination " + e.Destination + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// SchemeError is a URL without a scheme, or with one no imported
// publisher package registered.
type SchemeError struct {
	Scheme string // as written; "" when the URL has none
	URL    string // the URL without secrets, when it has no scheme
}

func (e *SchemeError) Error() string {
	use := "use " + strings.Join(func() []string {
		var out []string
		for _, s := range Schemes() {
			out = append(out, s+"://")
		}
		return out
	}(), ", ")
	if e.Scheme == "" {
		return e.URL + " has no scheme: " + use
	}
	return fmt.Sprintf("scheme %q is not supported: %s (import the publisher package that registers it)", e.Scheme, use)
}

// OpenError is a destination that could not be opened.
type OpenError struct {
	// Destination is the destination's Name.
	Destination string
	// Unreachable is true when the broker could not be reached (down,
	// refusing connections, timing out): trying again later may succeed.
	// False means the broker refused the configuration (the credentials,
	// the TLS setup, a missing queue or topic): it will refuse again.
	Unreachable bool
	// Err is the cause, as the broker's client reported it.
	Err error

	msg string
}

func (e *OpenError) Error() string { return e.msg }

func (e *OpenError) Unwrap() error { return e.Err }

// Unreachable is the *OpenError of a destination whose broker could not
// be reached: "cannot reach destination NAME at URL: cause".
func Unreachable(d *Destination, err error) *OpenError {
	return &OpenError{Destination: d.Name, Unreachable: true, Err: err,
		msg: fmt.Sprintf("cannot reach destination %s at %s: %s", d.Name, d.display, herald.Scrub(err.Error()))}
}

// RefusedCredentials is the *OpenError of a destination whose broker
// refused the credentials: "destination NAME at URL refused the
// credentials: cause".
func RefusedCredentials(d *Destination, err error) *OpenError {
	return &OpenError{Destination: d.Name, Err: err,
		msg: fmt.Sprintf("destination %s at %s refused the credentials: %s", d.Name, d.display, herald.Scrub(err.Error()))}
}

// Refused is the *OpenError of a destination that refused its
// configuration, worded by the publisher package: "destination NAME at
// URL" and what follows.
func Refused(d *Destination, err error, format string, args ...any) *OpenError {
	return &OpenError{Destination: d.Name, Err: err,
		msg: fmt.Sprintf("destination %s at %s", d.Name, d.display) + herald.Scrub(fmt.Sprintf(format, args...))}
}

// Failed is an *OpenError worded entirely by the publisher package; its
// message must name the destination.
func Failed(d *Destination, unreachable bool, err error, msg string) *OpenError {
	return &OpenError{Destination: d.Name, Unreachable: unreachable, Err: err, msg: herald.Scrub(msg)}
}
