package heraldui

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Config configures the operator page.
type Config struct {
	// Admin reads and changes the outbox table: a driver's store, such as
	// heraldpg.New's. Required.
	Admin heraldadmin.Admin
	// Prefix is the path the handler is mounted under, such as "/herald".
	// The handler sees whole paths: mount it with mux.Handle(prefix+"/", h),
	// not behind http.StripPrefix. A trailing slash is dropped. Defaults to
	// "" (the root).
	Prefix string
	// Token is the page's own login: acting (requeue, discard, pause,
	// retry now, replay) needs it, typed on the page's login form or sent
	// as an "Authorization: Bearer" header; reading stays open to whoever
	// reaches the handler. It must be at least MinTokenLen bytes long. It
	// excludes ExternalAuth. Defaults to "": no login of the page's own.
	Token string
	// ExternalAuth says that the service mounting the handler
	// authenticates and authorizes every request before it reaches the
	// handler (its own middleware, its own login): the page then offers its
	// actions to every request it receives, without a Token. Cross-origin
	// posts are still refused. Defaults to false: without a Token the page
	// is read-only.
	ExternalAuth bool
	// Rate returns, for each of the last minutes, oldest first, the
	// events published, the failed attempts and the oldest pending age.
	// It is called on every overview, possibly from several requests at
	// once. Defaults to nil: the page says the charts are not available.
	Rate func() []RatePoint
	// DestinationStatus returns each destination's state: its circuit
	// breaker, the calls in flight, its last error. Defaults to nil: no
	// Destinations section.
	DestinationStatus func() []Destination
	// DestinationOf names the destination a topic routes to
	// (heraldroute.Router.DestinationOf), so that a paused destination
	// shows the events it holds. Defaults to nil: shown as unknown.
	DestinationOf func(topic string) string
	// Destinations names the destinations the pause form offers. Defaults
	// to nil: any name may be typed.
	Destinations func() []string
	// Replay republishes published events through the service's
	// destinations (or, with ReplayRequest.DryRun, counts them). Defaults
	// to nil: no Replay page.
	Replay func(ctx context.Context, req ReplayRequest) (ReplayResult, error)
	// Databases links the pages of every database a process serves, one
	// of them Current (this handler's), in the header of every page.
	// Defaults to nil: one database, no links.
	Databases []DatabaseLink
	// Refresh is how often the overview's script reloads its figures, at
	// least 100ms. Defaults to 5s.
	Refresh time.Duration
	// Audit receives one line per action and per login. Defaults to Logger.
	Audit *slog.Logger
	// Logger receives the handler's errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// DatabaseLink is one database's page, for the header's links.
type DatabaseLink struct {
	Name    string
	Href    string // its overview, such as /db/orders/
	Current bool   // the database of the page it is shown on
}

// RatePoint is what one minute saw.
type RatePoint struct {
	Minute        time.Time // the start of the minute
	Published     int64     // events published
	Failed        int64     // attempts that failed (retried or dead)
	OldestPending time.Duration
}

// Destination is one destination's state, as the relay's /destinations
// reports it.
type Destination struct {
	Name        string    `json:"name"`
	Breaker     string    `json:"breaker"` // closed, open or half-open
	InFlight    int       `json:"in_flight"`
	Failures    int       `json:"failures"` // failed calls in a row
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// MinTokenLen is the shortest Config.Token New accepts.
const MinTokenLen = 16

// minRefresh is the shortest Config.Refresh New accepts: every refresh of
// every open overview reads the outbox table.
const minRefresh = 100 * time.Millisecond

// defaultRefresh is Config.Refresh's default.
const defaultRefresh = 5 * time.Second

// Bounds of the inputs the page accepts.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
	maxSelectedIDs   = 1000
	maxFormBytes     = 256 << 10
	blockedKeysShown = 50
	// storeTimeout bounds the store calls of one request.
	storeTimeout = 15 * time.Second
)

// contentSecurityPolicy allows the page's own stylesheet and script, and
// the script's fetches of the page's own JSON, and nothing else: no inline
// script or style, no frames, forms posting only back to the page.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

var prefixPattern = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)*$`)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the handler of the operator page.
func New(cfg Config) (http.Handler, error) {
	if cfg.Admin == nil {
		return nil, errors.New("heraldui: Config.Admin is required")
	}
	if cfg.Token != "" && len(cfg.Token) < MinTokenLen {
		return nil, fmt.Errorf("heraldui: Config.Token must be at least %d bytes long", MinTokenLen)
	}
	if cfg.Token != "" && cfg.ExternalAuth {
		return nil, errors.New("heraldui: Config.Token and Config.ExternalAuth exclude each other: " +
			"set Token for the page's own login, or ExternalAuth when your middleware decides who may act")
	}
	cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	if !prefixPattern.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("heraldui: Config.Prefix %q must be empty or a path such as /herald", cfg.Prefix)
	}
	switch {
	case cfg.Refresh == 0:
		cfg.Refresh = defaultRefresh
	case cfg.Refresh < minRefresh:
		return nil, fmt.Errorf("heraldui: Config.Refresh %v is shorter than %v", cfg.Refresh, minRefresh)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Audit == nil {
		cfg.Audit = cfg.Logger
	}
	h := &handler{cfg: cfg, now: time.Now, pages: map[string]*template.Template{}}
	// Sessions are signed with a key of this handler's own: a restart logs
	// everyone out, and no cookie outlives the process that issued it.
	h.key = make([]byte, 32)
	if _, err := rand.Read(h.key); err != nil {
		return nil, fmt.Errorf("heraldui: generating the session key: %w", err)
	}
	for _, name := range []string{"overview", "dead", "event", "confirm", "result", "parked", "login", "error", "retrying", "replay"} {
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("heraldui: parsing template %s: %w", name, err)
		}
		h.pages[name] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("heraldui: %w", err)
	}
	h.static = static

	p := cfg.Prefix
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+p+"/{$}", h.overview)
	mux.HandleFunc("GET "+p+"/dead", h.deadList)
	mux.HandleFunc("GET "+p+"/events/{id}", h.event)
	mux.HandleFunc("GET "+p+"/confirm", h.confirm)
	mux.HandleFunc("POST "+p+"/actions/{action}", h.action)
	mux.HandleFunc("POST "+p+"/pauses/{verb}", h.pauseAction)
	mux.HandleFunc("GET "+p+"/retrying", h.retrying)
	mux.HandleFunc("POST "+p+"/retrying/retry-now", h.retryNow)
	mux.HandleFunc("GET "+p+"/replay", h.replayPage)
	mux.HandleFunc("POST "+p+"/replay/{step}", h.replayAction)
	mux.HandleFunc("GET "+p+"/login", h.loginPage)
	mux.HandleFunc("POST "+p+"/login", h.login)
	mux.HandleFunc("POST "+p+"/logout", h.logout)
	mux.HandleFunc("GET "+p+"/static/{file}", h.serveStatic)
	// Unknown pages. Only GET: a known path asked with another method gets
	// the mux's 405 rather than this 404.
	mux.HandleFunc("GET "+p+"/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "There is no page at %s.", r.URL.Path)
	})
	if p != "" {
		mux.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
		})
	}

	// Form posts from another origin are refused before anything else
	// reads them; the per-session CSRF token is checked on top (actions).
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "Cross-origin requests are refused.")
	}))
	h.mux = cop.Handler(mux)
	return h, nil
}

type handler struct {
	cfg    Config
	mux    http.Handler
	pages  map[string]*template.Template
	static fs.FS
	key    []byte // signs sessions and derives their CSRF tokens
	now    func() time.Time
	// sessions are the live logins: a logout ends one for good.
	sessions sessionStore
	// limiter bounds the tries at guessing the token.
	limiter loginLimiter
	// replaying is set while a replay from the page runs: one at a time.
	replaying atomic.Bool
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	if tok, ok := bearer(r); ok && h.cfg.Token != "" {
		// Every request with a bearer token is a try at it: a page shows
		// whether the token was right.
		if wait := h.limiter.wait(r.RemoteAddr, h.now()); wait > 0 {
			h.throttled(w, r, wait)
			return
		}
		if !h.tokenMatches(tok) {
			h.wrongToken(r)
		}
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name != "admin.css" && name != "admin.js" {
		h.fail(w, r, http.StatusNotFound, "There is no page at %s.", r.URL.Path)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, h.static, name)
}

// storeCtx bounds the store calls of a request.
func storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), storeTimeout)
}

// view is what every page template gets.
type view struct {
	Title     string
	HasReplay bool // the Replay page is served
	Databases []DatabaseLink
	Page      string // the body's data-page, which tests and scripts key on
	Prefix    string
	Access    access
	CSRF      string
	Data      any
}

// render writes a page. Templates are executed into a buffer first so that
// a failure half-way never sends half a page with a 200.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	acc, sess := h.access(r)
	v := view{Title: title, Page: name, Prefix: h.cfg.Prefix, Access: acc, Data: data, HasReplay: h.cfg.Replay != nil,
		Databases: h.cfg.Databases}
	if sess != nil {
		v.CSRF = h.csrfToken(sess)
	}
	var b strings.Builder
	if err := h.pages[name].ExecuteTemplate(&b, "layout", v); err != nil {
		h.cfg.Logger.Error("heraldui: rendering page", "page", name, "error", herald.Scrub(err.Error()))
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// errorView is the data of the error page.
type errorView struct {
	Status  int
	Message string
}

// fail renders an error page. The message is scrubbed: it may quote a
// store error, which may quote a DSN.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, format string, args ...any) {
	msg := herald.Scrub(fmt.Sprintf(format, args...))
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
	}
	if wantsJSON(r) {
		h.writeJSON(w, status, errorJSON{Status: status, Error: msg})
		return
	}
	h.render(w, r, status, "error", http.StatusText(status), errorView{Status: status, Message: msg})
}

// storeFailed reports a store error: 500, logged, scrubbed.
func (h *handler) storeFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		h.fail(w, r, http.StatusGatewayTimeout, "The database did not answer in time while %s.", what)
		return
	}
	h.cfg.Logger.Error("heraldui: "+what, "error", herald.Scrub(err.Error()))
	h.fail(w, r, http.StatusInternalServerError, "Failed while %s: %v", what, err)
}
