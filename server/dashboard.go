package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/api"
)

// The dashboard on the daemon's listeners (docs/api.md "Dashboard",
// docs/decisions.md "The dashboard on the daemon's TCP listener"). A
// browser cannot send the bearer header, so the token is exchanged for a
// cookie: an authenticated client (ctxctl dashboard, over the unix socket
// or with the token) mints a one-time code (RouteDashboardLink); opening
// /ui/login?code=… spends it and sets an HttpOnly, SameSite=Strict cookie
// holding a random session value, which the /ui routes accept on TCP in
// place of the token. The cookie grants the read-only dashboard only,
// never the API. Codes and cookie values are kept as SHA-256 digests, in
// memory: a restart logs every browser out.
const (
	// uiPrefix is where the dashboard is served (package ui's Prefix).
	uiPrefix = "/ui"
	// uiLoginPath spends a code and sets the cookie.
	uiLoginPath = uiPrefix + "/login"
	// uiCookie is the cookie's name.
	uiCookie = "ctxd_dashboard"
	// uiCookieTTL is how long a cookie is good (its Max-Age).
	uiCookieTTL = 12 * time.Hour
	// maxUICodes and maxUISessions bound what is kept: past them the
	// oldest goes.
	maxUICodes    = 32
	maxUISessions = 64
)

// uiAuth holds the outstanding codes and the cookie sessions.
type uiAuth struct {
	mu       sync.Mutex
	codes    map[string]time.Time // digest → expiry
	sessions map[string]time.Time // digest → expiry
}

func digestHex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

func randomHex() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// add stores digest of v in m with expiry exp, first dropping what
// expired by now and, past limit, the entry expiring soonest.
func addBounded(m map[string]time.Time, v string, exp, now time.Time, limit int) {
	for k, e := range m {
		if !now.Before(e) {
			delete(m, k)
		}
	}
	for len(m) >= limit {
		var oldest string
		for k, e := range m {
			if oldest == "" || e.Before(m[oldest]) {
				oldest = k
			}
		}
		delete(m, oldest)
	}
	m[digestHex(v)] = exp
}

// mint returns a new one-time code and its expiry.
func (a *uiAuth) mint(now time.Time) (string, time.Time) {
	code := randomHex()
	exp := now.Add(api.DashboardLinkTTL)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.codes == nil {
		a.codes = map[string]time.Time{}
	}
	addBounded(a.codes, code, exp, now, maxUICodes)
	return code, exp
}

// spend uses code up and, when it was good, returns a new session value.
func (a *uiAuth) spend(code string, now time.Time) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := digestHex(code)
	exp, ok := a.codes[d]
	delete(a.codes, d)
	if !ok || !now.Before(exp) || code == "" {
		return "", false
	}
	if a.sessions == nil {
		a.sessions = map[string]time.Time{}
	}
	v := randomHex()
	addBounded(a.sessions, v, now.Add(uiCookieTTL), now, maxUISessions)
	return v, true
}

// valid reports whether r carries a good dashboard cookie.
func (a *uiAuth) valid(r *http.Request, now time.Time) bool {
	c, err := r.Cookie(uiCookie)
	if err != nil || c.Value == "" {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessions[digestHex(c.Value)]
	return ok && now.Before(exp)
}

// isUIPath reports whether path is the dashboard's.
func isUIPath(path string) bool { return path == uiPrefix || strings.HasPrefix(path, uiPrefix+"/") }

// serveUI answers a dashboard request: read-only, the checks of
// docs/design.md §8b (on TCP the token or the dashboard's cookie), then
// Options.UI; /ui/login spends a code.
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request) {
	if s.ui == nil {
		s.writeError(w, r, api.Errorf(api.NotFound, "", "this daemon serves no dashboard"))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		s.writeError(w, r, api.Errorf(api.MethodNotAllowed, "", "the dashboard is read-only: GET only"))
		return
	}
	if r.URL.Path == uiLoginPath {
		if r.Method != http.MethodGet {
			// A HEAD (a link preview, curl -I) must not spend the
			// one-time code that the browser's GET needs.
			w.Header().Set("Allow", "GET")
			s.writeError(w, r, api.Errorf(api.MethodNotAllowed, "", "a dashboard link is opened with GET only (HEAD would spend its one-time code)"))
			return
		}
		s.uiLogin(w, r)
		return
	}
	if err := s.checkAuth(r, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	if r.URL.Path == uiPrefix {
		http.Redirect(w, r, uiPrefix+"/", http.StatusFound)
		return
	}
	s.ui.ServeHTTP(w, r)
}

// uiLogin serves GET /ui/login?code=…: a good code sets the cookie and
// redirects to the dashboard (the code leaves the address bar).
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if err := s.checkAuth(r, true); err != nil && err.Code != api.Unauthorized {
		// Origin, Referer, Host and peer checks hold here too; only the
		// credential is what the code replaces.
		s.writeError(w, r, err)
		return
	}
	v, ok := s.uiAuth.spend(r.URL.Query().Get("code"), s.now())
	if !ok {
		s.writeError(w, r, api.Errorf(api.Unauthorized, "code", "this dashboard link was used already or has expired (links are good once, for %s): run `ctxctl dashboard` for a new one", api.DashboardLinkTTL))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: v, Path: uiPrefix, MaxAge: int(uiCookieTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, uiPrefix+"/", http.StatusSeeOther)
}

// dashboardLink serves RouteDashboardLink.
func (s *Server) dashboardLink(w http.ResponseWriter, r *http.Request) {
	if s.ui == nil {
		s.writeError(w, r, api.Errorf(api.Unavailable, "", "this daemon serves no dashboard"))
		return
	}
	code, exp := s.uiAuth.mint(s.now())
	out := api.DashboardLink{Path: uiLoginPath + "?code=" + code, Expires: exp.UTC()}
	if s.listen != "" {
		out.URL = "http://" + linkHost(s.listen) + out.Path
	}
	writeJSON(w, http.StatusOK, out)
}

// linkHost is the host:port a browser on this machine opens for listen
// address addr: an unspecified address (0.0.0.0, ::) is 127.0.0.1.
func linkHost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
