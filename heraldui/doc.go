// Package heraldui is Herald's operator page, as an http.Handler a service
// mounts in its own server: the destinations with their circuit breakers
// and last errors, the relays running, charts of the last minutes
// (throughput, failures, oldest pending age), the retrying events grouped
// by last error (retry now), the backlog of each topic, the keys parked by
// a dead event, the dead letters, which an operator can inspect, requeue
// and discard, pauses, and replays through the service's destinations.
// `herald relay --admin-addr` mounts the same handler.
//
// The page is rendered on the server from embedded templates. A small
// embedded script ticks "select all" boxes and refreshes the overview in
// place from its JSON every few seconds; every action works without it.
// Every page answers its URL in JSON when asked (Accept: application/json),
// under the same access rules.
//
// # Mounting
//
// New returns the handler of one outbox (Config.Admin, a driver's store).
// Mount it under a path prefix of the service's choosing, named in
// Config.Prefix, with mux.Handle(prefix+"/", h): the handler sees whole
// paths, so it is not put behind http.StripPrefix. Every link, form and
// asset of the page stays under the prefix.
//
// # Access
//
// Who may act (requeue, discard, pause, retry now, replay) is decided one
// of three ways:
//
//   - Config.ExternalAuth: the service wraps the handler in its own
//     authentication middleware, and whatever request passes it may act.
//     The page has no login of its own then; see the Example;
//   - Config.Token: the page's own login, which the herald daemon uses;
//   - neither: the page is read-only. It shows no action, and every POST
//     is refused with 403.
//
// With Config.Token, reading is open to whoever reaches the handler, so
// the page belongs on a private interface or behind the service's own
// middleware; acting needs the token, presented either way:
//
//   - in a browser, on the login page (/login): the token is checked and the
//     browser gets a session cookie (HttpOnly, SameSite=Strict, Secure over
//     TLS) that lasts 12 hours, until the process restarts, or until
//     logout, which ends the session on the server: a copy of the cookie is
//     refused afterwards. Every form post carries the session's CSRF token;
//   - from a script, as an "Authorization: Bearer TOKEN" header on the
//     action's POST, such as
//     curl -H "Authorization: Bearer $TOKEN" -d id=ID -d confirm=yes http://ADDR/actions/requeue
//
// Tokens are compared in constant time. Wrong tokens, by form or bearer
// header, are limited: a client address (an IPv6 /64) has 5 tries, and one
// more every 12 seconds; all clients together have 30, and one more every
// 2 seconds. Past that a try is answered 429 with Retry-After, without
// looking at the token; a right token spends nothing. Behind a reverse
// proxy every client has the proxy's address, so only the global limit
// tells them apart.
//
// Whichever way, cross-origin posts are refused
// (net/http.CrossOriginProtection), so a service's cookie login cannot be
// ridden by another site's form.
//
// Each action takes two steps: a confirmation page (/confirm) says what
// will change, and only its form, which carries confirm=yes, changes
// anything. Discarding a dead event that parks its key needs an explicit
// choice to resume the key, as `herald dead discard --resume` does. Every
// action, and every login, is written to the audit log (Config.Audit) with
// the remote address, how the requester got in (session, bearer or
// external), what was asked, which ids or topic, and how many rows changed.
//
// # What is shown
//
// Everything that comes from the outbox table (topics, keys, headers,
// payloads, errors) is escaped for HTML, with control and bidirectional
// override characters made visible. Payloads are previewed as text when
// they are UTF-8 and as a hex dump otherwise, both truncated. Last errors
// and error messages go through herald.Scrub, and the values of headers
// whose names suggest a credential (Authorization, Cookie, *token*,
// *secret*, ...) are hidden. Every response carries a Content-Security-Policy
// that allows no inline script or style.
package heraldui
