package server

import (
	"context"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/internal/bearer"
	"github.com/ctxd/ctxd/internal/netlimit"
)

// connInfo is what ConnContext learns about a connection once, when it is
// accepted: which kind of listener, and on the unix socket the peer's uid.
type connInfo struct {
	unix bool
	// uid and credErr: the peer's uid (SO_PEERCRED) or why it is unknown.
	uid     uint32
	credErr error
	// loopbackListener: the TCP listener is bound to a loopback address;
	// port is its port (the Host header must name it).
	loopbackListener bool
	port             string
}

type connInfoKey struct{}

// ConnContext records the listener kind and, on a unix socket, the peer's
// credentials of c (docs/design.md §8b). Set it as http.Server.ConnContext on
// every listener serving Handler; a request whose connection was not
// recorded is checked like a TCP request.
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	info := connInfo{}
	if u, ok := c.(interface{ Unwrap() net.Conn }); ok {
		// A connection counted by a netlimit.Listener.
		c = u.Unwrap()
	}
	switch conn := c.(type) {
	case *net.UnixConn:
		info.unix = true
		info.uid, info.credErr = peerUID(conn)
	default:
		if addr, ok := c.LocalAddr().(*net.TCPAddr); ok {
			info.loopbackListener = addr.IP.IsLoopback()
			info.port = strconv.Itoa(addr.Port)
		}
	}
	return context.WithValue(ctx, connInfoKey{}, info)
}

// IsOwnerConn reports whether c is a unix socket connection from a
// process of uid (the daemon's own user): the connections
// daemon.limits.owner_connections keeps a share for.
func IsOwnerConn(c net.Conn, uid uint32) bool {
	u, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	peer, err := peerUID(u)
	return err == nil && peer == uid
}

// secure wraps next with the version header, the request metrics and the
// checks of docs/design.md §8b, in that order: every response, refusals
// included, carries Ctxd-Version.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w.Header().Set(api.HeaderVersion, s.version)
		sw := &statusWriter{ResponseWriter: w}
		if n := netlimit.HeaderBytes(r); uint64(n) > s.headerMax {
			// net/http reads up to netlimit.HeaderSlack bytes past
			// MaxHeaderBytes: the exact limit is checked here.
			w.Header().Set("Connection", "close")
			s.writeError(sw, r, api.Errorf(api.HeaderTooLarge, "", "request line and headers of %d bytes, over daemon.limits.header_bytes (%d)", n, s.headerMax))
		} else if p := r.URL.Path; isUIPath(p) {
			if p != path.Clean(p) && p != path.Clean(p)+"/" {
				s.writeError(sw, r, api.Errorf(api.NotFound, "", "no route for the unclean path %q", p))
			} else {
				s.serveUI(sw, r)
			}
		} else if err := s.check(r); err != nil {
			s.writeError(sw, r, err)
		} else if p := r.URL.Path; p != path.Clean(p) && p != path.Clean(p)+"/" {
			// The mux would answer an unclean path ("/v1/sessions/../status")
			// with an HTML redirect; an API client gets the JSON envelope.
			s.writeError(sw, r, api.Errorf(api.NotFound, "", "no route for the unclean path %q", r.URL.Path))
		} else {
			next.ServeHTTP(sw, r)
		}
		route := r.Pattern
		if route == "" {
			route = "other"
		}
		s.metrics.request(route, sw.code(), time.Since(start))
	})
}

// check refuses what docs/design.md §8b refuses. Browsers can reach loopback
// and (through DNS rebinding) present any name, but they always send Origin
// or Referer on the requests a page makes, and keep the page's name in Host.
func (s *Server) check(r *http.Request) *api.Error { return s.checkAuth(r, false) }

// checkAuth is check; for the dashboard (ui) a good dashboard cookie
// stands for the bearer token on TCP.
func (s *Server) checkAuth(r *http.Request, ui bool) *api.Error {
	if r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
		return api.Errorf(api.Forbidden, "", "requests from web pages are refused (Origin or Referer header present)")
	}
	info, _ := r.Context().Value(connInfoKey{}).(connInfo)
	if info.unix {
		if info.credErr != nil {
			return api.Errorf(api.Forbidden, "", "peer credentials of the connection are unavailable: %v", info.credErr)
		}
		if info.uid != s.ownUID && !s.uidAllowed(info.uid) {
			return api.Errorf(api.Forbidden, "", "uid %d may not use this daemon (daemon.allowed_uids)", info.uid)
		}
		return nil
	}
	if !hostAllowed(r.Host, info) {
		return api.Errorf(api.Forbidden, "", "Host %q is not a loopback name of this listener", r.Host)
	}
	// docs/design.md §8b: TCP always needs the bearer token, loopback included
	// (every local user reaches a loopback port). A server given no token
	// refuses every TCP request; config and ctxd refuse such a listener
	// before it exists.
	if s.token == "" {
		return api.Errorf(api.Unauthorized, "", "the daemon API on TCP needs a bearer token and this daemon has none (daemon.auth_token_env); use the unix socket")
	}
	if ui {
		if bearer.Check(r, s.token) || s.uiAuth.valid(r, s.now()) {
			return nil
		}
		return api.Errorf(api.Unauthorized, "", "the dashboard on TCP needs the daemon's token: open the one-time link `ctxctl dashboard` prints, or send \"Authorization: Bearer <token>\" (daemon.auth_token_env)")
	}
	if !bearer.Check(r, s.token) {
		return api.Errorf(api.Unauthorized, "", "a valid \"Authorization: Bearer <token>\" header is required on TCP (daemon.auth_token_env)")
	}
	return nil
}

func (s *Server) uidAllowed(uid uint32) bool {
	s.uidMu.RLock()
	defer s.uidMu.RUnlock()
	return s.allowed[uid]
}

// hostAllowed reports whether a TCP request's Host names this daemon:
// "localhost" or a loopback IP, or — on a listener that is not loopback
// (allowed only with a bearer token) — any IP literal. A DNS name other
// than localhost is refused: that is what a rebinding page sends. The port
// must be the listener's; a Host without one names port 80 (HTTP's
// default), so it is refused on any other port.
func hostAllowed(hostport string, info connInfo) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "80"
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if info.port != "" && port != info.port {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	return ip.IsLoopback() || (info.port != "" && !info.loopbackListener)
}

// currentUID is the daemon's uid.
func currentUID() uint32 { return uint32(os.Getuid()) }

// statusWriter records the status code for the request metrics. It passes
// Flush through (event streams) and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
