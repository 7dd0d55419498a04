package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/netlimit"
	"github.com/ctxd/ctxd/internal/redact"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/proxy"
	"github.com/ctxd/ctxd/server"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/ui"
	"github.com/ctxd/ctxd/workers"
)

// Shutdown budgets (SIGINT/SIGTERM). systemd's TimeoutStopSec in
// contrib/ctxd.service is above their sum.
const (
	// httpShutdownTimeout bounds how long in-flight requests may finish
	// (a waited compaction may take longer: its connection is then closed
	// and the compaction itself continues under the pool's drain).
	httpShutdownTimeout = 10 * time.Second
	// poolDrainTimeout bounds how long running compactions may finish
	// before their contexts are cancelled (a cancelled compaction writes
	// no checkpoint and is simply redone after a restart).
	poolDrainTimeout = 20 * time.Second
	// expiryCheck is how often proxied sessions are checked for
	// proxy.quotas.session_expiry_hours.
	expiryCheck = time.Hour
	// readHeaderTimeout bounds a client's request line and headers. There
	// is no write timeout: event streams and waited compactions are long.
	readHeaderTimeout = 10 * time.Second
	// idleTrimAfter is how long the daemon must have served no request
	// before it returns the memory it no longer uses to the system, once
	// per idle period (a fleet's idle daemon stays small; the Go
	// runtime alone returns it over minutes). idleTrimCheck is how often it
	// looks.
	idleTrimAfter = 10 * time.Second
	idleTrimCheck = 2 * time.Second
)

// dirDataDefault is the data directory under $XDG_STATE_HOME (or
// ~/.local/state) when neither --data-dir nor storage.data_dir is set.
const dirDataDefault = "ctxd"

// badgerSubdir holds the badger files inside the data directory, beside the
// artifact secret and the offload directory.
const badgerSubdir = "db"

// Main is the daemon (STYLE.md: wtf's cmd/wtfd). ParseFlags (cli.go) reads
// the command line; Run opens the stores, serves until its context ends and
// then drains; Close releases what Run opened. Tests may set the fields
// instead of calling ParseFlags.
type Main struct {
	// ConfigFiles are the --config files, lowest layer first (docs/design.md §3).
	ConfigFiles []string
	// Socket, DataDir, Listen override daemon.socket, storage.data_dir and
	// daemon.listen when set (the flags given on the command line).
	Socket, DataDir, Listen string
	// LogFormat is "text" (default) or "json"; LogLevel "debug", "info"
	// (default), "warn" or "error".
	LogFormat, LogLevel string
	// SystemConfig is the system layer; "" means config.SystemPath.
	SystemConfig string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Stderr receives the logs; nil means os.Stderr.
	Stderr io.Writer
	// Stdout receives --help; nil means os.Stdout.
	Stdout io.Writer

	logger     *slog.Logger
	redactor   *redact.Redactor // the configured secrets, for logs and provider errors
	cfg        config.Config    // effective, after flag overrides
	socketPath string
	dataDir    string

	mu      sync.Mutex // guards the closers and cfg during reloads
	closers []func() error
	eng     *engine.Engine
	srv     *server.Server
	// dash is the dashboard, served by the daemon API's listeners and the
	// proxy's; tcpAddr the daemon's TCP listener as bound ("" for none).
	dash    *ui.Dashboard
	tcpAddr string
	poolRef interface{ Run(context.Context) error } // *workers.Pool or the fleet's *natsstore.Queue
	secret  []byte
	// reg is the registry served on /metrics (the engine's, the server's
	// and the proxy's collectors).
	reg *prometheus.Registry

	// The provider proxy (docs/design.md §10): nil when disabled or not
	// listening (proxyErr says why).
	prx       *proxy.Proxy
	proxyAddr string
	proxyErr  string
}

// NewMain returns a Main with the defaults of the command line.
func NewMain() *Main {
	return &Main{LogFormat: "text", LogLevel: "info"}
}

func (m *Main) stderr() io.Writer {
	if m.Stderr != nil {
		return m.Stderr
	}
	return os.Stderr
}

func (m *Main) getenv(k string) string {
	if m.Getenv != nil {
		return m.Getenv(k)
	}
	return os.Getenv(k)
}

// loadConfig reads every layer and applies the flags. Errors: the
// configuration's problems (a *config.Error), a flag that breaks a rule.
func (m *Main) loadConfig() (config.Config, []config.Warning, error) {
	sys := m.SystemConfig
	if sys == "" {
		sys = config.SystemPath
	}
	cfg, warnings, err := config.Load(config.Options{
		SystemPath: sys,
		UserPath:   config.UserPath(m.getenv),
		Files:      m.ConfigFiles,
	})
	if err != nil {
		return config.Config{}, warnings, err
	}
	if m.Socket != "" {
		cfg.Daemon.Socket = m.Socket
	}
	if m.DataDir != "" {
		cfg.Storage.DataDir = m.DataDir
	}
	if m.Listen != "" {
		cfg.Daemon.Listen = m.Listen
	}
	// config.Load checks daemon.listen, but --listen bypasses it: check
	// again (docs/design.md §8b: TCP always needs a bearer token; loopback does
	// not make it private).
	if cfg.Daemon.Listen != "" {
		lo, err := isLoopback(cfg.Daemon.Listen)
		if err != nil {
			return config.Config{}, warnings, err
		}
		if cfg.Daemon.AuthTokenEnv == "" {
			where := "every local user can reach a loopback port"
			if !lo {
				where = "it is not even a loopback address"
			}
			return config.Config{}, warnings, fmt.Errorf("daemon.listen %q: TCP needs a bearer token (%s): set daemon.auth_token_env to the name of an environment variable holding it, or remove the listener and use the unix socket", cfg.Daemon.Listen, where)
		}
	}
	return cfg, warnings, nil
}

// minAuthTokenLen is the shortest bearer token ctxd accepts for its TCP
// listener, in bytes: a shorter one could be guessed by any local user
// (e.g. generate one with `openssl rand -hex 32`).
const minAuthTokenLen = 16

// authToken reads the TCP listener's bearer token from the variable
// daemon.auth_token_env names; "" when there is no listener and the
// proxy does not need it (proxy.auth = "token"). Errors: the variable
// unset, empty or too short (the message never shows its value).
func (m *Main) authToken(cfg config.Config) (string, error) {
	proxyToken := cfg.Proxy.Enabled && cfg.Proxy.Auth == config.ProxyAuthToken
	if cfg.Daemon.Listen == "" && !proxyToken {
		return "", nil
	}
	env := cfg.Daemon.AuthTokenEnv
	token := m.getenv(env)
	switch {
	case token == "" && cfg.Daemon.Listen == "":
		return "", fmt.Errorf("daemon.auth_token_env names %s, which is unset or empty: proxy.auth = %q needs the daemon's bearer token; set it", env, config.ProxyAuthToken)
	case token == "":
		return "", fmt.Errorf("daemon.auth_token_env names %s, which is unset or empty: the TCP listener %s needs its bearer token; set it or remove daemon.listen", env, cfg.Daemon.Listen)
	case strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		// HTTP trims a header value's spaces: such a token can never match.
		return "", fmt.Errorf("the bearer token in %s contains white space or control characters: no client could send it (e.g. openssl rand -hex 32)", env)
	case len(token) < minAuthTokenLen:
		return "", fmt.Errorf("the bearer token in %s is %d bytes: use at least %d (e.g. openssl rand -hex 32)", env, len(token), minAuthTokenLen)
	}
	return token, nil
}

// effectiveDataDir is the data directory cfg (flags applied) names, as
// the daemon uses it: storage.data_dir or --data-dir, else
// defaultDataDir, made absolute. A reload compares its value with the
// running one, so a relative --data-dir (or none at all) is not taken
// for a change.
func (m *Main) effectiveDataDir(cfg config.Config) (string, error) {
	dir := cfg.Storage.DataDir
	if dir == "" {
		var err error
		if dir, err = m.defaultDataDir(); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	return abs, nil
}

// defaultDataDir is $XDG_STATE_HOME/ctxd, else ~/.local/state/ctxd (the XDG
// base directory for state that survives restarts but is not configuration).
func (m *Main) defaultDataDir() (string, error) {
	if d := m.getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, dirDataDefault), nil
	}
	home := m.getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("no data directory: set --data-dir or storage.data_dir (%w)", err)
		}
	}
	return filepath.Join(home, ".local", "state", dirDataDefault), nil
}

// Run starts the daemon and blocks until ctx ends (SIGINT/SIGTERM in main),
// then stops accepting, lets in-flight requests finish
// (httpShutdownTimeout), drains the pool (poolDrainTimeout) and returns.
// A SIGHUP while it runs reloads the configuration. Call Close afterwards,
// whatever Run returned.
func (m *Main) Run(ctx context.Context) (err error) {
	// SIGHUP is caught from the start: its default action kills the
	// process, and a reload asked for while the daemon starts (its socket
	// may already answer) is done once it runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	cfg, warnings, err := m.loadConfig()
	level, _ := parseLevel(m.LogLevel)
	m.redactor = redact.New(secretsOf(cfg, m.getenv)...)
	m.logger = newLogger(m.stderr(), m.LogFormat, level, m.redactor)
	m.onClose(captureStdLog(m.logger))
	for _, w := range warnings {
		m.logger.Warn("configuration", attrProblem, w.String())
	}
	if err != nil {
		logConfigError(m.logger, err)
		return fmt.Errorf("configuration: %w", err)
	}

	m.socketPath = cfg.Daemon.Socket
	if m.socketPath == "" {
		m.socketPath = api.DefaultSocketPath(m.getenv)
	}
	if m.dataDir, err = m.effectiveDataDir(cfg); err != nil {
		return err
	}
	cfg.Storage.DataDir = m.dataDir
	m.cfg = cfg

	token, err := m.authToken(cfg)
	if err != nil {
		return err
	}
	// The directories that hold sessions and tool results are the user's
	// alone: checked before anything is written into them.
	if err := m.checkDirs(cfg); err != nil {
		return err
	}

	// Listen first: a second daemon stops here, before touching badger
	// (whose directory lock would fail with a less helpful message).
	unixL, activated, err := m.listenUnix()
	if err != nil {
		return err
	}
	m.onClose(func() error { return ignoreClosed(unixL.Close()) })
	var tcpL net.Listener
	if cfg.Daemon.Listen != "" {
		if tcpL, err = net.Listen("tcp", cfg.Daemon.Listen); err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Daemon.Listen, err)
		}
		m.onClose(func() error { return ignoreClosed(tcpL.Close()) })
		m.tcpAddr = tcpL.Addr().String()
	}

	if err := m.open(ctx, cfg, token); err != nil {
		return err
	}
	proxyL, err := m.listenProxy(cfg, token)
	if err != nil {
		return err
	}

	poolCtx, stopPool := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPool()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	pool := m.poolRef
	wg.Go(func() { _ = pool.Run(poolCtx) })
	// Idle compaction timed to the prompt cache (docs/design.md §5.1).
	eng := m.eng
	wg.Go(func() { _ = eng.RunIdle(poolCtx, engine.IdleSweepInterval) })

	servers := []*http.Server{}
	// Requests on sessions and artifacts, for the idle trim (monitoring's
	// /v1/status and /metrics scrapes do not make the daemon busy).
	var served atomic.Uint64
	handler := m.srv.Handler()
	dl := cfg.Daemon.Limits
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/status") && !strings.HasPrefix(r.URL.Path, "/metrics") {
			served.Add(1)
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = netlimit.NewBodyTimer(w, r, time.Duration(dl.BodyTimeoutMS)*time.Millisecond, dl.BodyMinRate)
		}
		handler.ServeHTTP(w, r)
	})
	serve := func(l net.Listener, name string) {
		ll := &netlimit.Listener{Listener: l, Max: int(dl.Connections),
			Refusal: netlimit.Refusal503(apiRefusal("daemon.limits.connections", dl.Connections, name))}
		if _, unix := l.(*net.UnixListener); unix {
			uid := uint32(os.Getuid())
			ll.OwnerShare = int(dl.OwnerConnections)
			ll.IsOwner = func(c net.Conn) bool { return server.IsOwnerConn(c, uid) }
		}
		l = ll
		hs := &http.Server{
			Handler:           counted,
			ConnContext:       m.srv.ConnContext,
			ReadHeaderTimeout: readHeaderTimeout,
			MaxHeaderBytes:    int(dl.HeaderBytes),
			IdleTimeout:       time.Duration(dl.IdleTimeoutMS) * time.Millisecond,
			ErrorLog:          httpErrorLog(m.logger, name),
		}
		hs.RegisterOnShutdown(m.srv.BeginShutdown)
		hs.RegisterOnShutdown(m.dash.BeginShutdown)
		servers = append(servers, hs)
		wg.Go(func() {
			if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", name, err)
			}
		})
	}
	listenAddr := ""
	if tcpL != nil {
		listenAddr = tcpL.Addr().String()
	}
	// Logged before serving: the listeners already queue connections, and
	// whoever sees an answer can rely on the line being there.
	started := []any{attrVersion, api.Version, attrSocket, m.socketPath, attrActivated, activated,
		attrListen, listenAddr, attrTokenRequired, token != "", attrDataDir, m.dataDir, attrWorkers, cfg.Workers.Size, attrPID, os.Getpid()}
	// The storage backend, so that a fleet node's log says it is one (and
	// of which cluster and prefix) in its first line.
	if cfg.Storage.Backend == config.BackendNATS {
		// The configuration refuses credentials in a server URL.
		n := cfg.Storage.NATS
		prefix, replicas := n.Prefix, n.Replicas
		if prefix == "" {
			prefix = "ctxd"
		}
		if replicas == 0 {
			replicas = config.DefaultNATSReplicas
		}
		started = append(started, attrBackend, config.BackendNATS, "nats_servers", strings.Join(n.Servers, ","), "nats_prefix", prefix, "nats_replicas", replicas)
	} else {
		started = append(started, attrBackend, config.BackendBadger)
	}
	m.logger.Info("ctxd started", started...)
	serve(unixL, "unix socket")
	if tcpL != nil {
		serve(tcpL, "tcp")
	}
	if proxyL != nil {
		// Proxy traffic keeps the daemon busy for the idle trim too.
		proxyHandler := countServed(m.prx.Handler(), &served)
		pl := m.prx.Limits()
		proxyL = &netlimit.Listener{Listener: proxyL, Max: int(pl.Connections),
			Refusal: netlimit.Refusal503(proxy.ConnectionsRefusal(pl.Connections))}
		hs := &http.Server{
			Handler:           proxyHandler,
			ConnContext:       m.prx.ConnContext,
			ReadHeaderTimeout: readHeaderTimeout,
			MaxHeaderBytes:    int(pl.HeaderBytes),
			IdleTimeout:       time.Duration(pl.IdleTimeoutMS) * time.Millisecond,
			ErrorLog:          httpErrorLog(m.logger, "proxy"),
		}
		hs.RegisterOnShutdown(m.dash.BeginShutdown)
		servers = append(servers, hs)
		wg.Go(func() {
			if err := hs.Serve(proxyL); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve proxy: %w", err)
			}
		})
		m.logger.Info("provider proxy listening", attrListen, m.proxyAddr, "upstream", m.prx.Upstream(), "openai_upstream", m.prx.OpenAIUpstream())
	}

	if m.prx != nil {
		// Proxied sessions idle past proxy.quotas.session_expiry_hours
		// go, with their files: at start, then every expiryCheck.
		prx := m.prx
		wg.Go(func() {
			t := time.NewTimer(time.Minute)
			defer t.Stop()
			for {
				select {
				case <-poolCtx.Done():
					return
				case now := <-t.C:
					if _, err := prx.Expire(poolCtx, now); err != nil && poolCtx.Err() == nil {
						m.logger.Warn("expiring proxied sessions", attrErr, err)
					}
					t.Reset(expiryCheck)
				}
			}
		})
	}
	trim := time.NewTicker(idleTrimCheck)
	defer trim.Stop()
	idle := newIdleTrim(&served, time.Now())

	var runErr error
loop:
	for {
		select {
		case now := <-trim.C:
			if idle.due(now) {
				// A full collection that also returns the freed pages
				// now: tens of milliseconds, once per idle period.
				debug.FreeOSMemory()
				releaseMappedFiles(m.dataDir)
			}
		case <-ctx.Done():
			m.logger.Info("ctxd stopping", attrReason, context.Cause(ctx))
			break loop
		case err := <-errc:
			runErr = err
			m.logger.Error("ctxd stopping after a listener failed", attrErr, err)
			break loop
		case <-hup:
			m.reload()
		}
	}

	shutCtx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	for _, hs := range servers {
		if err := hs.Shutdown(shutCtx); err != nil {
			m.logger.Warn("requests still running at the shutdown deadline were cut", attrErr, err)
			_ = hs.Close()
		}
	}
	if m.prx != nil {
		// Answers already sent are recorded before the engine closes.
		if err := m.prx.WaitRecords(shutCtx); err != nil {
			m.logger.Warn("proxied answers still being recorded at the shutdown deadline were not recorded (each is recorded again from its client's next request)", attrErr, err)
		}
	}
	stopPool()
	wg.Wait()
	m.logger.Info("ctxd stopped")
	return runErr
}

// listenUnix takes the socket from systemd or creates it.
func (m *Main) listenUnix() (*net.UnixListener, bool, error) {
	l, n, err := activationListener(m.getenv)
	if err != nil {
		return nil, false, err
	}
	if l != nil {
		if n > 1 {
			m.logger.Warn("socket activation passed more than one socket; only the first is used", attrCount, n)
		}
		m.socketPath = l.Addr().String()
		return l, true, nil
	}
	l, err = listenUnix(m.socketPath)
	return l, false, err
}

// open opens the stores, the pool, the summarizer, the engine and the
// server, registering each for Close.
func (m *Main) open(ctx context.Context, cfg config.Config, token string) error {
	// checkDirs (in Run) created or checked the data directory.
	offloadDir := cfg.Offload.Dir
	if offloadDir == "" {
		offloadDir = filepath.Join(m.dataDir, "offload")
	}
	var dataSpace *store.Space
	var disks []server.GuardedDir
	if reserve := cfg.Storage.MinFreeBytes; reserve > 0 {
		dataSpace = store.NewSpace(m.dataDir, reserve, nil)
		// Badger replays its logs through memory maps at start: on a full
		// file system that is a SIGBUS, so refuse to start instead, in one
		// line naming the directory and the space needed.
		if free, low, err := dataSpace.State(); err == nil && low {
			return fmt.Errorf("data directory %s has %s free, less than the %s ctxd keeps free (storage.min_free_bytes): free at least %s there, or lower storage.min_free_bytes",
				m.dataDir, store.FormatBytes(free), store.FormatBytes(reserve), store.FormatBytes(reserve-free))
		}
		disks = []server.GuardedDir{{Name: server.DiskData, Space: dataSpace}, {Name: server.DiskOffload, Space: store.NewSpace(offloadDir, reserve, nil)}}
	}
	var (
		cps     checkpoint.Log
		arts    engine.ArtifactStore
		queue   engine.Queue
		stats   func() workers.Stats
		shared  bool
		storage func() *api.StorageStatus
		// capacity is the local queue's bound; a fleet's has none.
		capacity = int(cfg.Workers.Queue)
	)
	if cfg.Storage.Backend == config.BackendNATS {
		// A fleet node (docs/design.md §9): sessions, artifacts and compaction
		// jobs live in the NATS JetStream cluster; the data directory keeps
		// only offloaded files.
		st, q, secret, err := m.openNATS(ctx, cfg)
		if err != nil {
			return err
		}
		m.onClose(st.Close)
		fa, err := st.Artifacts(secret)
		if err != nil {
			return fmt.Errorf("open artifacts: %w", err)
		}
		m.secret = secret
		cps, arts, queue, stats, shared = st.Log(), fa, q, q.Stats, true
		m.poolRef = q
		storage = func() *api.StorageStatus {
			s := natsStatus(st.Status())
			fctx, cancel := context.WithTimeout(context.Background(), fleetStatusTimeout)
			defer cancel()
			if fs, err := q.Fleet(fctx); err == nil {
				s.NATS.Jobs = &api.FleetJobs{Queued: fs.Backlog, Held: fs.Held, Redelivered: fs.Redelivered, FreeWorkers: fs.FreeWorkers, AckWaitMS: fs.AckWait.Milliseconds()}
			}
			return s
		}
		capacity = 0
	} else {
		db, err := store.Open(filepath.Join(m.dataDir, badgerSubdir), store.Options{SyncWrites: cfg.Storage.SyncWrites, Logger: m.logger, Space: dataSpace})
		if err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		m.onClose(func() error { return closeStore(db, m.dataDir, store.FreeBytes, m.logger) })
		secret, err := artifacts.LoadSecret(m.dataDir)
		if err != nil {
			return fmt.Errorf("artifact secret: %w", err)
		}
		m.secret = secret
		ba, err := artifacts.Open(db, secret)
		if err != nil {
			return fmt.Errorf("open artifacts: %w", err)
		}
		m.onClose(ba.Close)
		bl := checkpoint.Open(db, checkpoint.Options{})
		m.onClose(bl.Close)
		pool, err := workers.New(workers.Options{Size: int(cfg.Workers.Size), Queue: int(cfg.Workers.Queue), DrainTimeout: poolDrainTimeout})
		if err != nil {
			return fmt.Errorf("workers: %w", err)
		}
		cps, arts, queue, stats = bl, ba, pool, pool.Stats
		m.poolRef = pool
		dir := filepath.Join(m.dataDir, badgerSubdir)
		storage = func() *api.StorageStatus { return &api.StorageStatus{Backend: api.StorageBadger, Dir: dir} }
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg = reg
	metrics := server.NewMetrics(reg)

	eng, err := engine.New(engine.Options{
		Config:     cfg,
		Log:        cps,
		Artifacts:  arts,
		Summarizer: summarizer.New(summarizer.Options{Logger: m.logger, Redactor: m.redactor}),
		Pool:       queue,
		Shared:     shared,
		Logger:     m.logger,
		Metrics:    metrics,
		OffloadDir: filepath.Join(m.dataDir, "offload"),
	})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	m.eng = eng
	m.dash = ui.New(eng)
	m.srv = server.New(server.Options{
		UI:            m.dash,
		Listen:        m.tcpAddr,
		Engine:        eng,
		Artifacts:     arts,
		Pool:          server.PoolInfo{Stats: stats, Size: int(cfg.Workers.Size), Capacity: capacity},
		Logger:        m.logger,
		Registry:      reg,
		Metrics:       metrics,
		AuthToken:     token,
		AllowedUIDs:   cfg.Daemon.AllowedUIDs,
		HeaderBytes:   cfg.Daemon.Limits.HeaderBytes,
		Disk:          disks,
		Redactor:      m.redactor,
		ProxyStatus:   m.proxyStatus,
		StorageStatus: storage,
	})
	return nil
}

// natsStatus is a fleet node's storage status for GET /v1/status.
func natsStatus(s natsstore.Status) *api.StorageStatus {
	return &api.StorageStatus{Backend: api.StorageNATS, NATS: &api.NATSStatus{
		Servers: s.Servers, State: s.State, ConnectedServer: s.ConnectedServer,
		DownSince: s.DownSince.UTC(), LastError: s.LastError, Prefix: s.Prefix, Replicas: s.Replicas,
		EventsStream: s.EventsStream, JobsStream: s.JobsStream, MetaBucket: s.MetaBucket, ArtifactsBucket: s.ArtifactsBucket,
	}}
}

// openNATS connects to the fleet's cluster ([storage.nats]), creating its
// streams and buckets if needed, and returns the store, this node's
// compaction queue (workers.size jobs at once) and the fleet's artifact
// secret. Errors name the configuration to fix.
func (m *Main) openNATS(ctx context.Context, cfg config.Config) (*natsstore.Store, *natsstore.Queue, []byte, error) {
	n := cfg.Storage.NATS
	o := natsstore.Options{Servers: n.Servers, CredentialsFile: n.CredentialsFile, Replicas: int(n.Replicas), Prefix: n.Prefix, Logger: m.logger, Name: "ctxd"}
	if o.Replicas == 0 {
		o.Replicas = config.DefaultNATSReplicas
	}
	o.AckWait = time.Duration(n.AckWaitMS) * time.Millisecond
	if o.AckWait == 0 {
		o.AckWait = config.DefaultNATSAckWaitMS * time.Millisecond
	}
	if n.TokenEnv != "" {
		if o.Token = m.getenv(n.TokenEnv); o.Token == "" {
			return nil, nil, nil, fmt.Errorf("storage.nats.token_env: environment variable %s is empty or unset", n.TokenEnv)
		}
	}
	octx, cancel := context.WithTimeout(ctx, natsOpenTimeout)
	defer cancel()
	st, err := natsstore.Open(octx, o)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("storage.nats: %w", err)
	}
	secret, err := st.Secret(octx)
	if err != nil {
		st.Close()
		return nil, nil, nil, fmt.Errorf("storage.nats: %w", err)
	}
	q, err := st.Queue(int(cfg.Workers.Size))
	if err != nil {
		st.Close()
		return nil, nil, nil, fmt.Errorf("storage.nats: %w", err)
	}
	return st, q, secret, nil
}

// fleetStatusTimeout bounds the read of the fleet's compaction queue for
// GET /v1/status; past it the status goes without it.
const fleetStatusTimeout = time.Second

// natsOpenTimeout bounds connecting to the NATS cluster and creating
// ctxd's streams at start.
const natsOpenTimeout = 30 * time.Second

// checkDirs creates or checks the data directory and the offload
// directory (privateDir): a too-open data directory or configured
// offload.dir stops the daemon with the chmod that fixes it; the default
// <data_dir>/offload, ctxd's own, is tightened with a warning.
func (m *Main) checkDirs(cfg config.Config) error {
	if _, err := privateDir(m.dataDir, "data directory", false); err != nil {
		return err
	}
	return m.checkOffloadDir(cfg)
}

// checkOffloadDir checks the offload directory of cfg (privateDir).
func (m *Main) checkOffloadDir(cfg config.Config) error {
	dir, ours := cfg.Offload.Dir, false
	if dir == "" {
		dir, ours = filepath.Join(m.dataDir, "offload"), true
	}
	tightened, err := privateDir(dir, "offload directory", ours)
	switch {
	case errors.Is(err, errOpenDir):
		return fmt.Errorf("%w (offload.dir)", err)
	case err != nil:
		// A directory that cannot be created or read is no leak: ctxd
		// starts and keeps oversized tool results whole, each append
		// saying so (offload_failed).
		m.logger.Warn("offload directory unusable; oversized tool results will be kept whole", attrDir, dir, attrErr, err)
		return nil
	}
	if tightened {
		m.logger.Warn("offload directory was open to other users; its mode is now 0700", attrDir, dir)
	}
	return nil
}

// listenProxy starts the provider proxy's listener when proxy.enabled.
// On one host (badger, proxy.auth = "loopback") a listener that cannot be
// opened (the port taken) does not stop the daemon: the daemon API still
// serves, and `ctxctl status` and `doctor` say why the proxy is not
// listening. On a fleet node (storage.backend = "nats") or a proxy meant
// for a load balancer (proxy.auth "token" or "frontend") it is an error
// that stops the start: the balancer would otherwise send agents to a node
// without a proxy.
func (m *Main) listenProxy(cfg config.Config, token string) (net.Listener, error) {
	if !cfg.Proxy.Enabled {
		return nil, nil
	}
	must := cfg.Storage.Backend == config.BackendNATS || (cfg.Proxy.Auth != "" && cfg.Proxy.Auth != config.ProxyAuthLoopback)
	prx, err := proxy.New(proxy.Options{Engine: m.eng, Secret: m.secret, Config: cfg.Proxy, Logger: m.logger, Metrics: server.NewProxyMetrics(m.reg), Redactor: m.redactor, Token: token, UI: m.dash})
	if err != nil {
		if must {
			return nil, fmt.Errorf("provider proxy: %w", err)
		}
		m.proxyErr = err.Error()
		m.logger.Error("provider proxy not started", attrErr, err)
		return nil, nil
	}
	l, err := net.Listen("tcp", cfg.Proxy.Listen)
	if err != nil {
		if must {
			return nil, fmt.Errorf("proxy.listen %s: %w (a fleet node or a proxy behind a load balancer does not start without its proxy; give each node sharing a host its own port)", cfg.Proxy.Listen, err)
		}
		m.proxyErr = fmt.Sprintf("listen on %s: %v", cfg.Proxy.Listen, err)
		m.logger.Error("provider proxy not started; the daemon API still serves", attrErr, m.proxyErr)
		return nil, nil
	}
	m.onClose(func() error { return ignoreClosed(l.Close()) })
	m.prx, m.proxyAddr = prx, l.Addr().String()
	return l, nil
}

// proxyStatus is the proxy's part of GET /v1/status.
func (m *Main) proxyStatus() *api.ProxyStatus {
	m.mu.Lock()
	enabled, mode := m.cfg.Proxy.Enabled, m.cfg.Proxy.Mode
	m.mu.Unlock()
	if mode == "" {
		mode = config.ProxyModeEnforce
	}
	st := &api.ProxyStatus{Enabled: enabled, Listen: m.proxyAddr, Error: m.proxyErr, Mode: mode}
	if m.prx != nil {
		s := m.prx.Stats()
		st.Upstream = m.prx.Upstream()
		for _, u := range m.prx.Upstreams() {
			st.Upstreams = append(st.Upstreams, api.ProxyUpstream{Name: u.Name, BaseURL: u.BaseURL, Endpoints: u.Endpoints})
		}
		st.Requests, st.Managed, st.PassedThrough, st.Overflows, st.Branches, st.Violations = s.Requests, s.Managed, s.PassedThrough, s.Overflows, s.Branches, s.Violations
		st.ClientRuleBreaks, st.DeclinedUpgrades = s.ClientRuleBreaks, s.DeclinedUpgrades
		if us, err := m.prx.Usage(context.Background()); err == nil {
			for _, u := range us {
				st.Credentials = append(st.Credentials, api.ProxyCredential{Credential: u.Credential, Sessions: u.Sessions, Bytes: u.Bytes})
			}
		}
		st.Conversations, st.MaxBranches = s.Conversations, s.MaxBranches
	}
	return st
}

// reload is SIGHUP: load every layer again; an invalid configuration is
// logged and ignored (the old one stays). Keys that only take effect at a
// restart keep their running values, with a warning.
func (m *Main) reload() {
	cfg, warnings, err := m.loadConfig()
	for _, w := range warnings {
		m.logger.Warn("configuration", attrProblem, w.String())
	}
	if err != nil {
		logConfigError(m.logger, err)
		m.logger.Error("configuration reload rejected; the running configuration is kept")
		return
	}
	if err := m.checkOffloadDir(cfg); err != nil {
		m.logger.Error("configuration reload rejected; the running configuration is kept", attrErr, err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.cfg
	// Compared as the daemon resolved it at start (flags, default,
	// absolute), not as written: `--data-dir ./state` is no change.
	dataDir, err := m.effectiveDataDir(cfg)
	if err != nil {
		dataDir = cfg.Storage.DataDir
	}
	keep := func(key string, changed bool) {
		if changed {
			m.logger.Warn("configuration key changed; it takes effect at the next restart", attrKey, key)
		}
	}
	keep("daemon.socket", cfg.Daemon.Socket != old.Daemon.Socket)
	keep("daemon.listen", cfg.Daemon.Listen != old.Daemon.Listen)
	keep("daemon.auth_token_env", cfg.Daemon.AuthTokenEnv != old.Daemon.AuthTokenEnv)
	keep("storage.data_dir", dataDir != m.dataDir)
	keep("storage.sync_writes", cfg.Storage.SyncWrites != old.Storage.SyncWrites)
	keep("storage.min_free_bytes", cfg.Storage.MinFreeBytes != old.Storage.MinFreeBytes)
	keep("workers.size", cfg.Workers.Size != old.Workers.Size)
	keep("workers.queue", cfg.Workers.Queue != old.Workers.Queue)
	keep("proxy", !reflect.DeepEqual(cfg.Proxy, old.Proxy))
	cfg.Proxy = old.Proxy
	cfg.Daemon.Socket, cfg.Daemon.Listen, cfg.Daemon.AuthTokenEnv = old.Daemon.Socket, old.Daemon.Listen, old.Daemon.AuthTokenEnv
	cfg.Storage = old.Storage
	cfg.Workers = old.Workers
	m.cfg = cfg
	// New bindings bring new keys; the running token stays (its variable
	// is read at start only).
	m.redactor.SetSecrets(append(secretsOf(cfg, m.getenv), secretsOf(old, m.getenv)...)...)
	m.srv.SetAllowedUIDs(cfg.Daemon.AllowedUIDs)
	m.eng.SetConfig(cfg)
	m.logger.Info("configuration reloaded", attrBindings, len(cfg.Summarizer.Bindings),
		attrAllowedUIDs, slices.Clone(cfg.Daemon.AllowedUIDs))
}

func (m *Main) onClose(f func() error) {
	m.mu.Lock()
	m.closers = append(m.closers, f)
	m.mu.Unlock()
}

// Close releases what Run opened, newest first: the stores' committers,
// then badger, then the listeners (removing the socket file this daemon
// created). It is safe to call after a failed Run, and more than once.
func (m *Main) Close() error {
	m.mu.Lock()
	closers := m.closers
	m.closers = nil
	m.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ignoreClosed drops the error of closing a listener that http.Server
// closed already.
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// logConfigError logs each problem of a configuration error on its own line.
func logConfigError(l *slog.Logger, err error) {
	if ce, ok := errors.AsType[*config.Error](err); ok {
		for _, p := range ce.Problems {
			l.Error("configuration", attrProblem, p.String())
		}
		return
	}
	l.Error("configuration", attrErr, err)
}

// countServed counts each request h serves in served (the idle trim's
// measure of activity: proxy traffic keeps the daemon busy too).
func countServed(h http.Handler, served *atomic.Uint64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		h.ServeHTTP(w, r)
	})
}

// idleTrim decides when the daemon returns the memory it no longer uses:
// once per idle period, idleTrimAfter after the last request counted in
// served.
type idleTrim struct {
	served     *atomic.Uint64
	last       uint64
	lastActive time.Time
	trimmed    bool
}

// newIdleTrim starts idle at now (nothing to trim before a request).
func newIdleTrim(served *atomic.Uint64, now time.Time) *idleTrim {
	return &idleTrim{served: served, last: served.Load(), lastActive: now, trimmed: true}
}

// due reports, at a check at now, whether to trim: requests were served
// since the last trim and none for idleTrimAfter.
func (t *idleTrim) due(now time.Time) bool {
	switch n := t.served.Load(); {
	case n != t.last:
		t.last, t.lastActive, t.trimmed = n, now, false
	case !t.trimmed && now.Sub(t.lastActive) >= idleTrimAfter:
		t.trimmed = true
		return true
	}
	return false
}

// apiRefusal is the daemon API's error envelope (unavailable) for a
// connection over the listener's cap.
func apiRefusal(key string, limit uint64, listener string) []byte {
	b, _ := json.Marshal(api.ErrorEnvelope{Error: &api.Error{Code: api.Unavailable,
		Message: fmt.Sprintf("the %s listener has %d connections open, its limit (%s); retry shortly", listener, limit, key)}})
	return b
}
