package main

import (
	"bytes"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

// secretCore is planted in the middle of a fuzzed password: any part of
// the password that shows with it is a leak.
const secretCore = "Qz9Sekr3t"

// fuzzInvocation is what the parsers of the command line need of a run;
// its stderr writes to out.
func fuzzInvocation(out *bytes.Buffer) *invocation {
	// A webhook's signing secret, so that webhook URLs are accepted.
	return &invocation{stderr: &redactor{w: out}, flags: newFlagSet("relay"), getenv: func(name string) (string, bool) {
		if name == webhookSecretEnv {
			return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true
		}
		return "", false
	}}
}

// printed is what a run prints of s: an error goes through scrub, as run
// prints it, and every line through the redactor, as logs do.
func printed(inv *invocation, out *bytes.Buffer, s string, isError bool) string {
	out.Reset()
	if isError {
		s = inv.stderr.scrub(s)
	}
	_, _ = io.WriteString(inv.stderr, s)
	return out.String()
}

// holdsCore reports whether s shows the core of a planted secret, as is
// or percent-decoded.
func holdsCore(s string) bool {
	for _, form := range []string{s, unescaped(s, url.PathUnescape), unescaped(s, url.QueryUnescape)} {
		if strings.Contains(strings.ToLower(form), strings.ToLower(secretCore)) {
			return true
		}
	}
	return false
}

func unescaped(s string, unescape func(string) (string, error)) string {
	if u, err := unescape(s); err == nil {
		return u
	}
	return s
}

// A destination URL with a password (or a NATS token) never shows it in
// the error that refuses the URL, nor in the form of it the relay prints;
// an accepted one names a supported broker and hosts.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []struct {
		scheme, user, before, after, host, rest string
		token                                   bool
	}{
		{"nats", "relay", "pw", "", "127.0.0.1:4222", "", false},
		{"nats", "", "", "", "127.0.0.1:4222", ",nats://127.0.0.1:4223", true},
		{"redis", "", "a", "b", "127.0.0.1:6379", "/0?maxlen=1000", false},
		{"amqp", "guest", `"quoted"`, "", "127.0.0.1", "/vhost?exchange=x", false},
		{"kafka", "u", "", "", "127.0.0.1:9092", ",kafka://127.0.0.1:9093", false},
		{"https", "u", "p@", "/x", "hooks.example.com", "/in?token=t", false},
		{"https", "u", "p", "", "hooks.example.com", "/services/T0/B0/XXXX?token=t", false},
		{"mqtt", "u", "", "", "127.0.0.1:1", "", false},
		{"nats", "u", "a,b", "", "127.0.0.1:1", "", false},
		{"nats", "u", "", "", "", "", false},
		{"NATS", "u", "%zz", "%41", "[::1]:4222", "", false},
		{"", "u", "", "", "host", "", false},
		{"nats", "u", "\\", "\x01", "host:99999", "", false},
		{"0", "", "0", "#", "00", "", true},
		{"nats", "u", "x", "/y", "host", "", false},
		{"kafka", "u", "pw", "", "127.0.0.1:9093", "?sasl=scram-sha-512&tls=true", false},
		{"kafka", "", "", "", "127.0.0.1:9093", "?sasl=plain", true},
		{"nats", "u", "pw", "", "127.0.0.1:4222", "?creds_file=/nonexistent&ca_file=/nonexistent", false},
		{"rediss", "u", "pw", "", "127.0.0.1:6380", "/0?maxlen=1&dial_timeout=zz&ca_file=/nonexistent", false},
		{"rediss", "", "a", "b", "h", "?db=%zz&client_name=x", false},
		{"redis", "u", "p", "", "h", "?skip_verify=true&nope=1", false},
		{"amqps", "u", "p", "", "127.0.0.1", "/?cacertfile=x&heartbeat=-1", false},
		{"amqps", "u", "p", "", "127.0.0.1:5671", "/v?exchange=e&cert_file=/nonexistent", false},
	} {
		f.Add(s.scheme, s.user, s.before, s.after, s.host, s.rest, s.token)
	}
	f.Fuzz(func(t *testing.T, scheme, user, before, after, host, rest string, token bool) {
		for _, part := range []string{scheme, user, host, rest} {
			if holdsCore(part) {
				return
			}
		}
		secret := before + secretCore + after
		info := user + ":" + secret
		if token {
			info = secret // nats://token@host
		}
		raw := scheme + "://" + info + "@" + host + rest
		var out bytes.Buffer
		inv := fuzzInvocation(&out)
		ep, err := parseEndpoint(inv, "--destination d", "d", raw)
		if err != nil {
			shown := printed(inv, &out, err.Error(), true)
			require.False(t, holdsCore(shown), "the error shows the password of %q: %s", raw, shown)
			return
		}
		shown := printed(inv, &out, ep.display, false)
		require.False(t, holdsCore(shown), "the display form of %q shows its password: %s", raw, shown)
		require.Contains(t, []string{"nats", "kafka", "redis", "amqp", "mqtt", "webhook", "sqs", "sns", "pubsub"}, ep.kind)
		if ep.kind == "webhook" {
			// A webhook's path or query is often its credential.
			_, where, _ := strings.Cut(ep.display, "://")
			require.NotContains(t, where, "/", "the display form of %q shows its path: %s", raw, ep.display)
			require.NotContains(t, where, "?", "the display form of %q shows its query: %s", raw, ep.display)
		}
		require.NotEmpty(t, ep.hosts)
		for _, h := range ep.hosts {
			require.NotEmpty(t, h)
		}
	})
}

// Whatever --db holds, it never shows its password in the error that
// refuses it nor in the description of the database, PostgreSQL's or
// MySQL's; a sqlite: DSN names its file.
func FuzzParseDB(f *testing.F) {
	for _, s := range []struct {
		user, before, after, host, rest string
		form                            uint8
	}{
		{"herald", "pw", "", "127.0.0.1:5432", "/outbox?sslmode=disable", 0},
		{"herald", "", "", "127.0.0.1:5432", "/outbox?sslmode=bogus", 0},
		{"herald", "p@", "@s", "db", "/outbox", 0},
		{"herald", "p/", "", "db", "/outbox", 0},
		{"herald", `"`, `\`, "db", "/outbox", 0},
		{"herald", "", "", "db:notaport", "/outbox", 0},
		{"herald", "a", "b", "127.0.0.1", "/outbox?sslmode=bogus", 1},
		{"herald", "'", "' x", "127.0.0.1", "", 1},
		{"0", "0@ ", "0", "%0", "", 0},
		{"u", "A/", "", "bb 0", "", 0},
		{"", "", "", "", "path/to/file.db", 2},
		{"", "", "", "", "//abs/file.db", 2},
		{"", "", "", "", "", 2},
		{"herald", "pw", "", "127.0.0.1:3306", "/outbox?tls=skip-verify", 3},
		{"herald", "p@", "@s", "db", "/outbox?timeout=soon", 3},
		{"herald", "p/", "", "db", "/outbox", 3},
		{"herald", "p%", "", "db:x", "/", 3},
		{"herald", "p,w", "", "db1:3306,db2", "/outbox?target_session_attrs=bogus", 3},
		{"herald", "pw", "", "db1,,db2:x", "/outbox?target_session_attrs=read-write", 3},
	} {
		f.Add(s.user, s.before, s.after, s.host, s.rest, s.form)
	}
	f.Fuzz(func(t *testing.T, user, before, after, host, rest string, form uint8) {
		for _, part := range []string{user, host, rest} {
			if holdsCore(part) {
				return
			}
		}
		secret := before + secretCore + after
		var raw string
		switch form % 4 {
		case 0:
			raw = "postgres://" + user + ":" + secret + "@" + host + rest
		case 1:
			if strings.ContainsAny(secret, "&#") {
				// Either ends the value: what follows is not the password.
				return
			}
			raw = "postgres://" + user + "@" + host + "/db?password=" + secret + rest
		case 2:
			raw = "sqlite:" + rest
		case 3:
			raw = "mysql://" + user + ":" + secret + "@" + host + rest
		}
		var out bytes.Buffer
		inv := fuzzInvocation(&out)
		d := addDBFlags(inv.flags)
		*d.db = raw
		db, err := d.parseDB(inv, true)
		if err != nil {
			shown := printed(inv, &out, err.Error(), true)
			require.False(t, holdsCore(shown), "the error shows the password of %q: %s", raw, shown)
			return
		}
		shown := printed(inv, &out, db.where, false)
		require.False(t, holdsCore(shown), "the description of %q shows its password: %s", raw, shown)
		if form%4 == 2 {
			path, _ := strings.CutPrefix(strings.TrimSpace(raw), "sqlite:")
			lite, ok := db.spec.Target().(*heraldsqlite.DSNConfig)
			require.True(t, ok, "%q opens SQLite", raw)
			require.Equal(t, strings.TrimPrefix(path, "//"), lite.Path)
			require.NotEmpty(t, lite.Path)
		}
	})
}
