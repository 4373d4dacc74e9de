// Package adminui is Herald's operator page: the destinations with their
// circuit breakers and last errors, the relays running, charts of the last
// minutes (throughput, failures, oldest pending age), the retrying events
// grouped by last error (retry now), the backlog of each topic, the keys
// parked by a dead event, the dead letters, which an operator can inspect,
// requeue and discard, pauses, and replays through the running relay's
// destinations. `herald relay --admin-addr` mounts it.
//
// The page is rendered on the server from embedded templates. A small
// embedded script ticks "select all" boxes and refreshes the overview in
// place from its JSON every few seconds; every action works without it.
// Every page answers its URL in JSON when asked (Accept: application/json),
// under the same access rules.
//
// # Access
//
// Reading is open to whoever reaches the handler, so the admin address
// belongs on a private interface. Acting (requeue, discard) needs the
// token of Config.Token (retry now and replay too), presented either way:
//
//   - in a browser, on the login page (/login): the token is checked and the
//     browser gets a session cookie (HttpOnly, SameSite=Strict, Secure over
//     TLS) that lasts 12 hours, until the relay restarts, or until logout,
//     which ends the session on the server: a copy of the cookie is refused
//     afterwards. Every form post
//     carries the session's CSRF token, and cross-origin posts are refused
//     (net/http.CrossOriginProtection);
//   - from a script, as an "Authorization: Bearer TOKEN" header on the
//     action's POST, such as
//     curl -H "Authorization: Bearer $TOKEN" -d id=ID -d confirm=yes http://ADDR/actions/requeue
//
// Tokens are compared in constant time. With no token configured the page
// is read-only: it shows no action, and every POST is refused with 403.
//
// Wrong tokens, by form or bearer header, are limited: a client address
// (an IPv6 /64) has 5 tries, and one more every 12 seconds; all clients
// together have 30, and one more every 2 seconds. Past that a try is
// answered 429 with Retry-After, without looking at the token; a right
// token spends nothing. Behind a reverse proxy every client has the
// proxy's address, so only the global limit tells them apart.
//
// Each action takes two steps: a confirmation page (/confirm) says what
// will change, and only its form, which carries confirm=yes, changes
// anything. Discarding a dead event that parks its key needs an explicit
// choice to resume the key, as `herald dead discard --resume` does. Every
// action, and every login, is written to the audit log with the remote
// address, what was asked, which ids or topic, and how many rows changed.
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
package adminui
