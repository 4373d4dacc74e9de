package main

import (
	"bytes"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/herald-outbox/herald"
)

// redactor knows the secrets of this run (the database password, the NATS
// password or token) and removes them from text. Every error printed goes
// through scrub, and stderr, where logs go, is wrapped by it as a last line
// of defence: pgx, for one, can echo a DSN in its errors.
type redactor struct {
	w io.Writer

	mu      sync.Mutex
	secrets []string
}

// add registers secrets in every spelling they may be printed in: as given,
// percent-decoded and percent-encoded.
func (r *redactor) add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if s == "" {
			continue
		}
		forms := []string{s, url.QueryEscape(s), url.PathEscape(s)}
		if dec, err := url.PathUnescape(s); err == nil {
			forms = append(forms, dec)
		}
		for _, f := range forms {
			if f != "" && !contains(r.secrets, f) {
				r.secrets = append(r.secrets, f)
			}
		}
	}
	// Longest first, so that a secret containing another is replaced whole.
	for i := 1; i < len(r.secrets); i++ {
		for j := i; j > 0 && len(r.secrets[j]) > len(r.secrets[j-1]); j-- {
			r.secrets[j], r.secrets[j-1] = r.secrets[j-1], r.secrets[j]
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

const redacted = "xxxxx"

// scrub removes the known secrets and whatever herald.Scrub recognises
// (URL passwords, password=...), and folds s onto one line.
func (r *redactor) scrub(s string) string {
	r.mu.Lock()
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	r.mu.Unlock()
	s = herald.Scrub(s)
	s = strings.ReplaceAll(strings.ReplaceAll(s, ":\n", ": "), "\n", "; ")
	return strings.Join(strings.Fields(s), " ")
}

// Write writes p with the known secrets replaced. It reports len(p) so
// that callers do not take the shorter write for a failure.
func (r *redactor) Write(p []byte) (int, error) {
	r.mu.Lock()
	out := p
	for _, secret := range r.secrets {
		if bytes.Contains(out, []byte(secret)) {
			out = bytes.ReplaceAll(out, []byte(secret), []byte(redacted))
		}
	}
	r.mu.Unlock()
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// userinfoSecrets returns the secrets in the user information of a URL,
// parseable or not: the password, and the user name too when userIsSecret
// and there is no password (a NATS token: nats://token@host).
func userinfoSecrets(raw string, userIsSecret bool) []string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	// The user information ends at the last '@' before the path; a
	// password may itself hold '@' or ':'.
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		if at := strings.LastIndex(rest, "@"); at < i {
			rest = rest[:i]
		}
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	info := rest[:at]
	user, password, hasPassword := strings.Cut(info, ":")
	switch {
	case hasPassword:
		return []string{password}
	case userIsSecret:
		return []string{user}
	}
	return nil
}
