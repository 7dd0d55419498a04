// Package server is ctxd's HTTP layer (docs/design.md §7): handlers on a
// net/http.ServeMux with the api.Route* method patterns that decode strictly
// (size-capped), call the engine and encode; the one mapping from engine
// errors to api error codes; the local-security checks of docs/design.md §8b
// (peer uid on the unix socket, Origin/Referer/Host and bearer token on
// TCP); and the Prometheus metrics of /metrics. It holds no business rules.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/redact"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/workers"
)

// ArtifactGetter reads an artifact by id (artifacts.Store satisfies it).
// Errors: artifacts.ErrInvalidID, artifacts.ErrNotFound, others.
type ArtifactGetter interface {
	Get(ctx context.Context, id artifacts.ID) ([]byte, artifacts.Format, error)
}

// PoolInfo describes the compaction pool for GET /v1/status and the queue
// metrics: Stats is read on each request; Size and Capacity are fixed
// (workers.size and workers.queue, docs/design.md §3).
type PoolInfo struct {
	Stats    func() workers.Stats
	Size     int
	Capacity int
}

// Options configure a Server. Engine is required.
type Options struct {
	// Engine serves every session route.
	Engine *engine.Engine
	// Artifacts serves GET /v1/artifacts/{id}; nil answers not_found.
	Artifacts ArtifactGetter
	// Pool describes the worker pool; a nil Stats reports zeros.
	Pool PoolInfo
	// Logger receives one line per failed request (details of internal
	// errors stay here, never in responses); nil means slog.Default().
	Logger *slog.Logger
	// Registry is the private Prometheus registry served on /metrics. The
	// Server registers its collectors on it (see NewMetrics for the engine's
	// own). nil makes a new one.
	Registry *prometheus.Registry
	// Metrics is the engine's Metrics implementation registered on
	// Registry (NewMetrics); nil makes one on Registry.
	Metrics *Metrics
	// Version is sent in the api.HeaderVersion header of every response and
	// in GET /v1/status; "" means api.Version.
	Version string
	// AuthToken is the bearer token every TCP request must carry
	// ("Authorization: Bearer <token>", docs/design.md §8b), compared in
	// constant time. "" refuses every TCP request (401); the unix socket
	// never needs it. Never logged.
	AuthToken string
	// ProxyStatus, when set, reports the provider proxy in GET /v1/status.
	ProxyStatus func() *api.ProxyStatus
	// StorageStatus, when set, reports the storage backend (and a fleet
	// node's NATS connection) in GET /v1/status. It must not block: it is
	// read on every status request, also during a storage outage.
	StorageStatus func() *api.StorageStatus
	// AllowedUIDs may connect over the unix socket besides the daemon's
	// own uid (daemon.allowed_uids). SetAllowedUIDs changes it later.
	AllowedUIDs []uint32
	// HeaderBytes caps a request's line and headers, in bytes
	// (daemon.limits.header_bytes), as netlimit.HeaderBytes counts them: a
	// larger request is answered 431 header_too_large naming the key. Serve
	// the handler with http.Server.MaxHeaderBytes set to the same value,
	// which bounds what net/http reads to it plus netlimit.HeaderSlack.
	// 0 means config.DefaultDaemonLimits's.
	HeaderBytes uint64
	// OwnUID is the daemon's uid; the zero value of Options takes
	// os.Getuid() (set OwnUIDSet to use 0 explicitly).
	OwnUID    uint32
	OwnUIDSet bool
	// Redactor masks secrets in the message of every error answer and
	// its log line (docs/design.md §8b); nil masks key-shaped strings only.
	Redactor *redact.Redactor
	// Heartbeat is the interval of ": ping" comments on an event stream;
	// 0 means api.EventsHeartbeat.
	Heartbeat time.Duration
	// Now is the clock (uptime); nil means time.Now.
	Now func() time.Time
	// UI, when set, is the dashboard (package ui), served under /ui on
	// every listener: on TCP behind the bearer token or the cookie a
	// one-time link sets (RouteDashboardLink; docs/api.md "Dashboard").
	UI http.Handler
	// Listen is the TCP listener's address (daemon.listen as bound), for
	// the dashboard links' URL; "" when there is none.
	Listen string
	// Disk are the guarded directories (storage.min_free_bytes), reported
	// in GET /v1/status and the disk_low metric. The one named "data" is
	// checked before each append, session creation and compaction, which
	// are refused with api.InsufficientStorage below its reserve.
	Disk []GuardedDir
}

// GuardedDir is a directory whose free space the daemon guards.
type GuardedDir struct {
	// Name is "data" or "offload" (the metrics' dir label).
	Name string
	// Space is the guard; its Dir and Reserve are reported.
	Space *store.Space
}

// Server answers the API of docs/design.md §7. Create it with New; it is safe for
// concurrent use.
type Server struct {
	headerMax uint64
	eng       *engine.Engine
	artifacts ArtifactGetter
	pool      PoolInfo
	log       *slog.Logger
	reg       *prometheus.Registry
	metrics   *Metrics
	version   string
	token     string
	red       *redact.Redactor
	ownUID    uint32
	heartbeat time.Duration
	now       func() time.Time
	started   time.Time
	spaces    []GuardedDir
	proxy     func() *api.ProxyStatus
	storage   func() *api.StorageStatus
	ui        http.Handler
	listen    string
	uiAuth    uiAuth

	uidMu   sync.RWMutex
	allowed map[uint32]bool

	// streams ends followed event streams at shutdown (BeginShutdown), which
	// http.Server.Shutdown would otherwise wait on forever.
	streams       context.Context
	cancelStreams context.CancelFunc

	handler http.Handler
}

// New returns a Server for opts. It panics when opts.Engine is nil (a
// wiring mistake, not a runtime condition).
func New(opts Options) *Server {
	if opts.Engine == nil {
		panic("server: Options.Engine is required")
	}
	s := &Server{
		eng:       opts.Engine,
		artifacts: opts.Artifacts,
		pool:      opts.Pool,
		log:       opts.Logger,
		reg:       opts.Registry,
		metrics:   opts.Metrics,
		version:   opts.Version,
		token:     opts.AuthToken,
		red:       opts.Redactor,
		ownUID:    opts.OwnUID,
		heartbeat: opts.Heartbeat,
		now:       opts.Now,
		spaces:    opts.Disk,
		proxy:     opts.ProxyStatus,
		storage:   opts.StorageStatus,
		headerMax: opts.HeaderBytes,
		ui:        opts.UI,
		listen:    opts.Listen,
	}
	if s.headerMax == 0 {
		s.headerMax = config.DefaultDaemonLimits().HeaderBytes
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(s.reg)
	}
	if s.version == "" {
		s.version = api.Version
	}
	if !opts.OwnUIDSet {
		s.ownUID = currentUID()
	}
	if s.heartbeat <= 0 {
		s.heartbeat = api.EventsHeartbeat
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.started = s.now().UTC()
	s.SetAllowedUIDs(opts.AllowedUIDs)
	s.streams, s.cancelStreams = context.WithCancel(context.Background())
	s.metrics.registerState(s.reg, s)
	s.handler = s.secure(s.routes())
	return s
}

// Handler returns the HTTP handler of every route, wrapped in the checks of
// docs/design.md §8b. Serve it from an http.Server whose ConnContext is
// (*Server).ConnContext, so that each request knows its listener and peer.
func (s *Server) Handler() http.Handler { return s.handler }

// SetAllowedUIDs replaces daemon.allowed_uids (a SIGHUP reload). The
// daemon's own uid is always allowed.
func (s *Server) SetAllowedUIDs(uids []uint32) {
	m := make(map[uint32]bool, len(uids)+1)
	for _, u := range uids {
		m[u] = true
	}
	s.uidMu.Lock()
	s.allowed = m
	s.uidMu.Unlock()
}

// BeginShutdown ends every followed event stream with an api.Unavailable
// error event naming the seq to resume from. Register it with
// http.Server.RegisterOnShutdown: Shutdown waits for idle connections, and
// a followed stream never becomes idle on its own.
func (s *Server) BeginShutdown() { s.cancelStreams() }

// routes builds the mux: every api route, then for each route path a
// method-less pattern answering 405 with the envelope (the mux's own 405
// body is plain text), and "/" answering 404 with the envelope.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handlers := map[string]http.HandlerFunc{
		api.RouteCreateSession:  s.createSession,
		api.RouteListSessions:   s.listSessions,
		api.RouteGetSession:     s.getSession,
		api.RoutePatchSession:   s.patchSession,
		api.RouteDeleteSession:  s.deleteSession,
		api.RouteStartRun:       s.startRun,
		api.RouteAppendMessages: s.appendMessages,
		api.RouteContext:        s.context,
		api.RouteCompact:        s.compact,
		api.RouteCheckpoints:    s.checkpoints,
		api.RouteEvents:         s.events,
		api.RouteSearch:         s.search,
		api.RouteReadMessages:   s.readMessages,
		api.RouteArtifact:       s.artifact,
		api.RouteStatus:         s.status,
		api.RouteMetrics:        s.metricsHandler(),
		api.RouteLedger:         s.ledger,
		api.RouteSetMode:        s.setMode,
		api.RouteLedgerTotals:   s.ledgerTotals,
		api.RouteDashboardLink:  s.dashboardLink,
	}
	methods := map[string][]string{}
	for _, route := range api.Routes() {
		h, ok := handlers[route]
		if !ok {
			panic("server: no handler for " + route)
		}
		mux.Handle(route, h)
		method, path, _ := strings.Cut(route, " ")
		methods[path] = append(methods[path], method)
		if method == http.MethodGet {
			methods[path] = append(methods[path], http.MethodHead)
		}
	}
	for path, ms := range methods {
		sort.Strings(ms)
		allow := strings.Join(ms, ", ")
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			s.writeError(w, r, api.Errorf(api.MethodNotAllowed, "", "method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, api.Errorf(api.NotFound, "", "no route %s %s", r.Method, r.URL.Path))
	})
	return mux
}
