package heraldui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sessionCookie holds a signed session: a random id and an expiry.
const sessionCookie = "herald_admin_session"

// sessionTTL is how long a login lasts.
const sessionTTL = 12 * time.Hour

// session is a verified login.
type session struct {
	id      []byte // 16 random bytes
	expires time.Time
}

// access is what the requester may do, for the templates.
type access struct {
	ReadOnly bool // no token configured, no ExternalAuth: nobody can act
	LoggedIn bool // a session cookie, a bearer token, or ExternalAuth
	Bearer   bool // authenticated by the Authorization header
	External bool // authenticated by the service mounting the handler
}

// CanAct reports whether action buttons are shown.
func (a access) CanAct() bool { return !a.ReadOnly && a.LoggedIn }

// method is how the requester was let in, for the audit log.
func (a access) method() string {
	switch {
	case a.External:
		return "external"
	case a.Bearer:
		return "bearer"
	}
	return "session"
}

// readOnlyMessage is the refusal of an action on a read-only page.
const readOnlyMessage = "This page is read-only: it runs without an admin token."

// tokenMatches compares a presented token with the configured one in time
// independent of where they differ, and of the presented one's length:
// both are hashed first.
func (h *handler) tokenMatches(presented string) bool {
	if h.cfg.Token == "" {
		return false
	}
	a := sha256.Sum256([]byte(presented))
	b := sha256.Sum256([]byte(h.cfg.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// bearer returns the token of an Authorization header and whether there is
// one. A malformed header counts as a wrong token, not as none.
func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// access says who the requester is. A bearer header decides alone: a
// wrong one is not rescued by a cookie. With ExternalAuth the service's
// middleware has decided already; an Authorization header is its own.
func (h *handler) access(r *http.Request) (access, *session) {
	if h.cfg.ExternalAuth {
		return access{LoggedIn: true, External: true}, nil
	}
	if h.cfg.Token == "" {
		return access{ReadOnly: true}, nil
	}
	if tok, ok := bearer(r); ok {
		return access{LoggedIn: h.tokenMatches(tok), Bearer: true}, nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return access{}, nil
	}
	s, ok := h.verifySession(c.Value)
	if !ok {
		return access{}, nil
	}
	return access{LoggedIn: true}, s
}

func (h *handler) mac(purpose string, data []byte) []byte {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(data)
	return m.Sum(nil)
}

var b64 = base64.RawURLEncoding

// newSession returns a fresh session, recorded as live, and its cookie
// value: base64(id | expiry) "." base64(HMAC).
func (h *handler) newSession() (*session, string) {
	s := &session{id: make([]byte, 16), expires: h.now().Add(sessionTTL)}
	_, _ = rand.Read(s.id) // crypto/rand.Read never fails (Go 1.24+)
	h.sessions.add(string(s.id), s.expires, h.now())
	body := binary.BigEndian.AppendUint64(append([]byte{}, s.id...), uint64(s.expires.Unix()))
	return s, b64.EncodeToString(body) + "." + b64.EncodeToString(h.mac("session", body))
}

func (h *handler) verifySession(v string) (*session, bool) {
	bodyText, sigText, ok := strings.Cut(v, ".")
	if !ok {
		return nil, false
	}
	body, err1 := b64.DecodeString(bodyText)
	sig, err2 := b64.DecodeString(sigText)
	if err1 != nil || err2 != nil || len(body) != 24 || !hmac.Equal(sig, h.mac("session", body)) {
		return nil, false
	}
	s := &session{id: body[:16], expires: time.Unix(int64(binary.BigEndian.Uint64(body[16:])), 0)}
	if !h.now().Before(s.expires) || !h.sessions.live(string(s.id)) {
		return nil, false
	}
	return s, true
}

// maxSessions bounds the live sessions a handler remembers. Logins are
// rate-limited, so only a long run of logins without logouts reaches it;
// the session closest to its expiry is then ended.
const maxSessions = 1000

// sessionStore is the set of live sessions. A signed cookie alone would
// stay valid until its expiry even after a logout, for whoever copied it;
// a session is valid only while its id is here.
type sessionStore struct {
	mu      sync.Mutex
	expires map[string]time.Time // by session id
}

func (st *sessionStore) add(id string, expires, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.expires == nil {
		st.expires = map[string]time.Time{}
	}
	for old, exp := range st.expires {
		if !now.Before(exp) {
			delete(st.expires, old)
		}
	}
	for len(st.expires) >= maxSessions {
		var first string
		for old, exp := range st.expires {
			if first == "" || exp.Before(st.expires[first]) {
				first = old
			}
		}
		delete(st.expires, first)
	}
	st.expires[id] = expires
}

func (st *sessionStore) live(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.expires[id]
	return ok
}

func (st *sessionStore) end(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.expires, id)
}

// csrfToken is the session's form token: derived from its id, so nothing
// is stored, and useless with another session.
func (h *handler) csrfToken(s *session) string {
	return b64.EncodeToString(h.mac("csrf", s.id))
}

func (h *handler) csrfValid(s *session, presented string) bool {
	return subtle.ConstantTimeCompare([]byte(presented), []byte(h.csrfToken(s))) == 1
}

func (h *handler) setSessionCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    value,
		Path:     h.cfg.Prefix + "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}

// authorizeAction checks a state-changing POST: a token is configured, the
// requester presents it (bearer or session), and a session's post carries
// its CSRF token. It writes the refusal and returns false when one fails.
// The form must be parsed.
func (h *handler) authorizeAction(w http.ResponseWriter, r *http.Request) (access, bool) {
	acc, sess := h.access(r)
	switch {
	case acc.ReadOnly:
		h.fail(w, r, http.StatusForbidden, readOnlyMessage)
		return acc, false
	case !acc.LoggedIn && acc.Bearer:
		h.audit(r, "login_failed", slog.String("method", "bearer"))
		h.fail(w, r, http.StatusUnauthorized, "The bearer token is wrong.")
		return acc, false
	case !acc.LoggedIn:
		h.fail(w, r, http.StatusUnauthorized, "Log in with the admin token first.")
		return acc, false
	case sess != nil && !h.csrfValid(sess, r.PostFormValue("csrf")):
		h.fail(w, r, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
		return acc, false
	}
	return acc, true
}

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if !h.hasLogin(w, r) {
		return
	}
	h.render(w, r, http.StatusOK, "login", "Log in", loginView{})
}

// hasLogin says whether the page has a login of its own (Config.Token),
// and refuses the request when it has none.
func (h *handler) hasLogin(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case h.cfg.ExternalAuth:
		h.fail(w, r, http.StatusNotFound, "This page has no login of its own: the service that serves it decides who may act.")
		return false
	case h.cfg.Token == "":
		h.fail(w, r, http.StatusForbidden, readOnlyMessage+" There is nothing to log in to.")
		return false
	}
	return true
}

type loginView struct {
	Wrong bool
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.hasLogin(w, r) {
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if wait := h.limiter.wait(r.RemoteAddr, h.now()); wait > 0 {
		h.throttled(w, r, wait)
		return
	}
	if !h.tokenMatches(r.PostFormValue("token")) {
		h.wrongToken(r)
		h.audit(r, "login_failed", slog.String("method", "form"))
		h.render(w, r, http.StatusUnauthorized, "login", "Log in", loginView{Wrong: true})
		return
	}
	_, value := h.newSession()
	h.setSessionCookie(w, r, value, int(sessionTTL/time.Second))
	h.audit(r, "login", slog.String("method", "form"))
	http.Redirect(w, r, h.cfg.Prefix+"/", http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if !h.hasLogin(w, r) {
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	_, sess := h.access(r)
	if _, ok := h.authorizeAction(w, r); !ok {
		return
	}
	if sess != nil {
		// The cookie is dropped by the browser and, should a copy of it
		// be replayed, refused here.
		h.sessions.end(string(sess.id))
	}
	h.setSessionCookie(w, r, "", -1)
	h.audit(r, "logout")
	http.Redirect(w, r, h.cfg.Prefix+"/", http.StatusSeeOther)
}

// wrongToken spends a try of the requester's, and says so in the audit log
// when that was its (or everyone's) last one for now.
func (h *handler) wrongToken(r *http.Request) {
	if h.limiter.failed(r.RemoteAddr, h.now()) {
		h.audit(r, "login_throttled")
	}
}

// throttled refuses a try at the token with 429 and when to try again.
func (h *handler) throttled(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	// The page must not tell whether the refused bearer token was right.
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	h.fail(w, r, http.StatusTooManyRequests, "Too many wrong tokens: try again in %d seconds.", secs)
}
