// Package proxy is ctxd's provider proxy (docs/design.md §10): an agent
// points its provider base URL at the proxy's listener and gets ctxd's
// three layers with no other change. The proxy is orchestration: the
// listener (its security and routing), the conversations (matching a
// request to what was recorded, branches, recording) and the attempt loop
// over the upstream. Each wire API is its wire.Dialect's; the rules are the
// engine's and those of identity, quota and clientcred.
package proxy

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/clientcred"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/netlimit"
	"github.com/ctxd/ctxd/internal/peeruid"
	"github.com/ctxd/ctxd/internal/redact"
	"github.com/ctxd/ctxd/quota"
)

// Options configure a Proxy. Engine and Secret are required.
type Options struct {
	// Engine records and assembles the sessions.
	Engine *engine.Engine
	// Secret is the daemon secret: the key of the credential fingerprints
	// and session ids (docs/design.md §8).
	Secret []byte
	// Config is the [proxy] table.
	Config config.Proxy
	// Logger receives the proxy's logs (never a credential or a body).
	Logger *slog.Logger
	// Transport sends upstream requests; nil means a clone of
	// http.DefaultTransport with the configured timeouts.
	Transport http.RoundTripper
	// Metrics receives the proxy's measures (server.ProxyMetrics); nil:
	// none.
	Metrics Metrics
	// Redactor masks secrets in what the proxy logs and records; every
	// credential a client sends is held on it (Redactor.Hold) for as long
	// as the proxy holds it. Give it the daemon's (the one its logger
	// and the summarizer use); nil means a redactor of the proxy's own.
	Redactor *redact.Redactor
	// Token is the daemon's bearer token, which every request carries in
	// the TokenHeader when Config.Auth is "token"; required then.
	Token string
	// UI, when set, serves the read-only dashboard (package ui) at
	// UIPrefix on this listener: GET and HEAD only, under the listener's
	// own checks (loopback Host, no Origin or Referer).
	UI http.Handler
}

// TokenHeader carries the daemon's bearer token on a proxy request when
// proxy.auth is "token"; the proxy removes it before forwarding, so the
// provider never sees it.
const TokenHeader = "Ctxd-Proxy-Token"

// UIPrefix is the path of the dashboard on the proxy listener (Options.UI).
const UIPrefix = "/ui"

// Proxy serves the provider-compatible endpoints. It is safe for
// concurrent use.
type Proxy struct {
	// trailing counts the answers' records running after their response
	// ended (trail.go).
	trailing sync.WaitGroup
	eng      *engine.Engine
	secret   []byte
	token    string // the daemon's bearer token with proxy.auth = "token"
	cfg      config.Proxy
	ui       http.Handler
	limits   config.ProxyLimits
	log      *slog.Logger
	upstream *url.URL // Anthropic's
	openai   *url.URL
	// transport sends to the upstreams; errLog is net/http's error log
	// of the reverse proxy, a record of the proxy's logger (forward).
	transport http.RoundTripper
	errLog    *log.Logger

	mu    sync.Mutex
	lanes map[string]*lane
	// encOrder lists the branches keeping an encoding cache, oldest first.
	encOrder []*branch
	// laneBytes and cacheBytes are the estimated sizes of the lanes and of
	// the branches' caches (memory.go); useSeq orders the lanes' uses.
	laneBytes, cacheBytes int64
	useSeq                uint64
	// budget bounds laneBytes+cacheBytes (proxy.memory_bytes).
	budget int64

	// creds holds the clients' credentials and those the upstream
	// accepted (clientcred).
	creds clientcred.Store
	m     Metrics
	red   *redact.Redactor
	quota *quota.Table

	// Counters for status.
	requests, managed, passed, overflows, branches, violations, clientRules atomic.Uint64
	conversations, maxBranches, declinedUpgrades                            atomic.Uint64
}

// New returns a Proxy. Errors: a missing Engine or Secret, a bad upstream
// base URL.
func New(o Options) (*Proxy, error) {
	if o.Engine == nil || len(o.Secret) == 0 {
		return nil, fmt.Errorf("proxy: Engine and Secret are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Config.Auth == config.ProxyAuthToken && o.Token == "" {
		return nil, fmt.Errorf("proxy.auth = %q: the daemon's bearer token (daemon.auth_token_env) is not set", config.ProxyAuthToken)
	}
	up := o.Config.Upstreams.Anthropic
	u, ou, err := o.Config.Upstreams.BaseURLs()
	if err != nil {
		return nil, err
	}
	p := &Proxy{ui: o.UI, eng: o.Engine, secret: o.Secret, token: o.Token, cfg: o.Config, limits: o.Config.Limits.WithDefaults(), log: o.Logger.With("component", "proxy"), upstream: u, openai: ou, lanes: map[string]*lane{}}
	p.quota, p.budget = quota.New(p.eng.ProxiedQuotas), o.Config.MemoryBound()
	p.red = o.Redactor
	if p.red == nil {
		p.red = redact.New()
	}
	p.m = o.Metrics
	if p.m == nil {
		p.m = noMetrics{}
	}
	o.Engine.SetSessionBindings(p.sessionBindings)
	tr := o.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: up.DialTimeout(), KeepAlive: 30 * time.Second}).DialContext
		t.ResponseHeaderTimeout = time.Duration(up.HeaderTimeoutMS) * time.Millisecond
		tr = t
	}
	p.transport, p.errLog = tr, slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	return p, nil
}

// Upstream returns the Anthropic upstream's base URL, without userinfo.
func (p *Proxy) Upstream() string { return shown(p.upstream) }

// OpenAIUpstream returns the OpenAI upstream's base URL, without userinfo.
func (p *Proxy) OpenAIUpstream() string { return shown(p.openai) }

// Upstream is one configured upstream, as status shows it.
type Upstream struct {
	// Name is the [proxy.upstreams.<name>] key.
	Name string
	// BaseURL is its base URL without userinfo.
	BaseURL string
	// Endpoints are the managed paths it serves.
	Endpoints []string
}

// Upstreams returns every configured upstream: anthropic, then openai.
func (p *Proxy) Upstreams() []Upstream {
	ups := []Upstream{{Name: "anthropic", BaseURL: p.Upstream()}, {Name: "openai", BaseURL: p.OpenAIUpstream()}}
	for _, d := range dialects {
		u := &ups[0]
		if d.Upstream() == "openai" {
			u = &ups[1]
		}
		u.Endpoints = append(u.Endpoints, d.Path())
	}
	return ups
}

// shown is u without its userinfo (a user or password in a base URL is a
// credential: never shown or logged).
func shown(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// upstreamFor is the upstream of a request: its endpoint's, or for one
// ctxd does not manage, upstreamOf's choice (errorDialect).
func (p *Proxy) upstreamFor(r *http.Request) *url.URL {
	return p.upstreamURL(errorDialect(r).Upstream())
}

// upstreamURL is the base URL of the upstream named up ("anthropic" or
// "openai", wire.Dialect.Upstream).
func (p *Proxy) upstreamURL(up string) *url.URL {
	if up == "openai" {
		return p.openai
	}
	return p.upstream
}

// Stats are the proxy's counters since start.
type Stats struct {
	// Requests is every request served; Managed those whose messages ctxd
	// recorded and assembled; PassedThrough those forwarded untouched
	// (other endpoints, and requests ctxd could not manage).
	Requests, Managed, PassedThrough uint64
	// Overflows counts upstream context-length refusals recovered by an
	// overflow compaction; Branches the client rewrites recorded.
	Overflows, Branches uint64
	// Violations counts assembled contexts that broke docs/design.md §4a and
	// were not sent (the client's own request went instead): each is a bug.
	Violations uint64
	// ClientRuleBreaks counts client requests that themselves broke
	// docs/design.md §4a in their new messages: ctxd's context went with
	// those messages as the client wrote them, for the provider to judge;
	// they are not recorded nor counted in Violations.
	ClientRuleBreaks uint64
	// Conversations counts the conversations whose first session this
	// proxy created; MaxBranches is the most sessions (branches) one
	// conversation has had since start: a client that touches what it
	// resends must not start a branch per request (docs/design.md §10).
	Conversations, MaxBranches uint64
	// DeclinedUpgrades counts the protocol upgrades (a WebSocket opened on
	// GET /v1/responses by Codex) declined with 426 so that the client
	// uses HTTP, where its requests are managed (declineUpgrade).
	DeclinedUpgrades uint64
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{Requests: p.requests.Load(), Managed: p.managed.Load(), PassedThrough: p.passed.Load(),
		Overflows: p.overflows.Load(), Branches: p.branches.Load(), Violations: p.violations.Load(),
		ClientRuleBreaks: p.clientRules.Load(), Conversations: p.conversations.Load(), MaxBranches: p.maxBranches.Load(),
		DeclinedUpgrades: p.declinedUpgrades.Load()}
}

type connPortKey struct{}

// startKey is the context key of the time a request reached the proxy.
type startKey struct{}

// ConnContext records the listener's port for the Host check; set it as
// http.Server.ConnContext.
func (p *Proxy) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		ctx = context.WithValue(ctx, connPortKey{}, strconv.Itoa(a.Port))
		if r, ok := c.RemoteAddr().(*net.TCPAddr); ok && r.IP.IsLoopback() {
			// Looked up only when a conversation starts (peerUID): the
			// accept loop stays cheap.
			ctx = context.WithValue(ctx, peerAddrsKey{}, [2]*net.TCPAddr{r, a})
		}
	}
	return ctx
}

// peerAddrsKey is the context key of a loopback connection's client and
// server addresses.
type peerAddrsKey struct{}

// peerUID is the uid of the local user whose process opened the request's
// connection (peeruid.TCP), when known.
func peerUID(ctx context.Context) (uint32, bool) {
	a, ok := ctx.Value(peerAddrsKey{}).([2]*net.TCPAddr)
	if !ok {
		return 0, false
	}
	return peeruid.TCP(a[0], a[1])
}

// refuseDashboard says why the dashboard is refused to r, or "". It shows
// summaries and the user's first request: on a loopback listener, which
// every local user reaches, it is served to the daemon's own user only
// (the connection's uid, peeruid.TCP); where that uid cannot be
// read, to nobody (the daemon's TCP listener with `ctxctl dashboard`
// serves it under the token). With proxy.auth = token every request
// carries the token already; with frontend the frontend decides.
func (p *Proxy) refuseDashboard(r *http.Request) string {
	if p.cfg.Auth == config.ProxyAuthToken || p.cfg.Auth == config.ProxyAuthFrontend {
		return ""
	}
	uid, ok := peerUID(r.Context())
	if ok && uid == uint32(os.Getuid()) {
		return ""
	}
	if !ok {
		return "ctxd proxy: the dashboard on the proxy's port is served to the daemon's own user, and this connection's user cannot be read here; use `ctxctl dashboard` (the daemon's TCP listener)"
	}
	return fmt.Sprintf("ctxd proxy: the dashboard shows conversations: it is served to the daemon's own user (uid %d) only, not uid %d", os.Getuid(), uid)
}

// foreignOverlay is the session overlay of a conversation whose agent runs
// as another local user than the daemon: no offloading, whose stubs would
// send that agent to read files in the daemon user's private directory.
const foreignOverlay = "[offload]\nenabled = false\n"

// Handler serves the proxy: POST /v1/messages, /v1/responses and
// /v1/chat/completions managed, everything else forwarded untouched. No daemon API route is served here.
func (p *Proxy) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		r = r.WithContext(context.WithValue(r.Context(), startKey{}, time.Now()))
		// The request's credentials are masked everywhere while it is
		// served (docs/operating.md "Security model").
		defer p.red.HoldHeader(r.Header)()
		// net/http reads up to HeaderSlack bytes past MaxHeaderBytes: the
		// exact limit is checked here, refused naming its key.
		if n := netlimit.HeaderBytes(r); uint64(n) > p.limits.HeaderBytes {
			w.Header().Set("Connection", "close")
			p.refused(w, r, http.StatusRequestHeaderFieldsTooLarge, "request_too_large", fmt.Sprintf("ctxd proxy: request line and headers of %d bytes, over proxy.limits.header_bytes (%d)", n, p.limits.HeaderBytes))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = netlimit.NewBodyTimer(w, r, time.Duration(p.limits.BodyTimeoutMS)*time.Millisecond, p.limits.BodyMinRate)
		}
		if p.cfg.Auth == config.ProxyAuthToken {
			got := r.Header.Get(TokenHeader)
			r.Header.Del(TokenHeader) // never forwarded
			if subtle.ConstantTimeCompare([]byte(got), []byte(p.token)) != 1 {
				p.refused(w, r, http.StatusUnauthorized, "authentication_error", "ctxd proxy: proxy.auth is \"token\": send the daemon's bearer token in the "+TokenHeader+" header")
				return
			}
		}
		if msg := p.refuse(r); msg != "" {
			p.refused(w, r, http.StatusForbidden, "permission_error", msg)
			return
		}
		if isUpgrade(r) {
			p.declineUpgrade(w, r)
			return
		}
		if p.ui != nil && (r.URL.Path == UIPrefix || strings.HasPrefix(r.URL.Path, UIPrefix+"/")) {
			p.serveUI(w, r)
			return
		}
		if isCountTokens(r) {
			p.countTokens(w, r)
			return
		}
		if d := dialectOf(r); d != nil {
			if ce := encodedBody(r); ce != "" {
				// Forwarded as it came (streamed, not read).
				p.passThrough(w, r, nil, outcomePassedThrough, fmt.Sprintf("not managed: the body is sent with Content-Encoding %q, which ctxd does not decode; send it unencoded to have it managed", ce))
				return
			}
			p.serveManaged(w, r, d)
			return
		}
		p.passThrough(w, r, nil, outcomePassedThrough, "")
	})
}

// refused answers r with a refusal of the listener, counted.
func (p *Proxy) refused(w http.ResponseWriter, r *http.Request, status int, typ, msg string) {
	p.m.Request(apiLabel(dialectOf(r)), outcomeRefused)
	writeError(w, r, status, typ, msg)
}

// serveUI serves the dashboard: read-only, never forwarded upstream.
func (p *Proxy) serveUI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, r, http.StatusMethodNotAllowed, "invalid_request_error", "ctxd proxy: the dashboard is read-only: GET only")
		return
	}
	if msg := p.refuseDashboard(r); msg != "" {
		writeError(w, r, http.StatusForbidden, "permission_error", msg)
		return
	}
	if r.URL.Path == UIPrefix {
		http.Redirect(w, r, UIPrefix+"/", http.StatusFound)
		return
	}
	p.ui.ServeHTTP(w, r)
}

// refuse applies docs/design.md §8b to the proxy listener: no Origin or Referer
// (a web page), and a Host that names loopback on this listener's port (a
// DNS-rebinding page keeps its own name in Host). A Host without a port
// names port 80 (HTTP's default), refused on any other port.
func (p *Proxy) refuse(r *http.Request) string {
	if r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
		return "ctxd proxy: requests from web pages are refused (Origin or Referer header present)"
	}
	if a := p.cfg.Auth; a == config.ProxyAuthToken || a == config.ProxyAuthFrontend {
		// Behind a load balancer: Host is the balancer's name, and a
		// request is authenticated (by the token, or by the frontend).
		return ""
	}
	if r.Method == http.MethodConnect {
		// A tunnel would reach any host: only the configured upstreams are
		// ever reached (docs/design.md §8b).
		return "ctxd proxy: CONNECT is refused: the proxy forwards HTTP requests to its configured upstreams only"
	}
	if p := r.URL.Path; p != path.Clean(p) && p != path.Clean(p)+"/" || strings.Contains(r.URL.RawPath, "%2e") || strings.Contains(r.URL.RawPath, "%2E") {
		// "/v1/x/../messages" would be forwarded unmanaged, and the
		// upstream would read it as /v1/messages.
		return fmt.Sprintf("ctxd proxy: the unclean path %q is refused (dot segments or an encoded dot)", r.URL.Path)
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]"), "80"
	}
	if lp, _ := r.Context().Value(connPortKey{}).(string); lp != "" && port != lp {
		return fmt.Sprintf("ctxd proxy: Host %q is not this listener", r.Host)
	}
	if strings.EqualFold(host, "localhost") {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	return fmt.Sprintf("ctxd proxy: Host %q is not a loopback name", r.Host)
}

// isUpgrade reports whether r asks for a protocol upgrade (a WebSocket).
func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" || headerHasToken(r.Header, "Connection", "upgrade")
}

// declineUpgrade answers a protocol upgrade with 426 and closes the
// connection: nothing reaches the upstream. Codex opens a WebSocket on GET
// /v1/responses first and falls back to HTTP at once on a 426 (other
// statuses, or a connection that never answers, make it retry the upgrade
// first); over HTTP its requests are managed. ctxd does not carry the
// WebSocket transport yet: an unmanaged tunnel would bypass every layer
// (docs/decisions.md "The WebSocket transport is declined for now"). The decline
// is logged, counted (Stats.DeclinedUpgrades) and said in Ctxd-Diagnostic.
func (p *Proxy) declineUpgrade(w http.ResponseWriter, r *http.Request) {
	p.declinedUpgrades.Add(1)
	p.m.Request(apiLabel(nil), outcomeUpgradeDeclined)
	proto := headerSafe(r.Header.Get("Upgrade"))
	msg := fmt.Sprintf("ctxd proxy: the %q upgrade of %s %s is declined: ctxd manages the HTTP transport only; send the request over HTTP", proto, r.Method, r.URL.Path)
	p.log.Info("protocol upgrade declined; the client is expected to use HTTP", "path", r.URL.Path, "upgrade", proto, "user_agent", headerSafe(r.UserAgent()))
	w.Header().Set(HeaderDiagnostic, headerSafe(msg))
	w.Header().Set("Connection", "close")
	errorDialect(r).WriteError(w, http.StatusUpgradeRequired, "invalid_request_error", msg)
}

// writeError answers r with ctxd's own error in the shape of its API: its
// endpoint's dialect's, else the Messages API's.
func writeError(w http.ResponseWriter, r *http.Request, status int, typ, msg string) {
	d := dialectOf(r)
	if d == nil {
		d = dialectAnthropic
	}
	d.WriteError(w, status, typ, msg)
}
