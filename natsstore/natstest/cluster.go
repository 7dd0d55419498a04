// Package natstest starts NATS JetStream servers in process, on loopback,
// for tests of the NATS backend (docs/design.md §9): a cluster of real servers
// (github.com/nats-io/nats-server/v2), no external service. Only tests
// import it.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is n JetStream servers forming one cluster on 127.0.0.1, their
// stores under one directory.
type Cluster struct {
	mu      sync.Mutex
	opts    []*server.Options
	servers []*server.Server // nil: stopped
	log     *warnLog
}

// Start starts a cluster of n servers (n ≥ 1; 3 for R3 streams) with
// their stores under dir and waits until JetStream answers. Errors: a
// server that does not start or a cluster that does not form in 30 s
// (scaled by Scale), after three tries on fresh ports.
func Start(dir string, n int) (*Cluster, error) { return StartSync(dir, n, false) }

// StartSync is Start with each server's JetStream fsyncing every write
// before acknowledging it (sync_interval: always) when syncAlways is set;
// otherwise JetStream's default (a sync every 2 minutes, durability by
// replication).
func StartSync(dir string, n int, syncAlways bool) (*Cluster, error) {
	// The ports are found free, then given to the servers: another process
	// may take one in between (test binaries start clusters at once), so a
	// cluster that does not start is tried again on other ports.
	var err error
	for attempt := range 3 {
		var c *Cluster
		if c, err = startOnce(filepath.Join(dir, fmt.Sprintf("a%d", attempt)), n, syncAlways); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func startOnce(dir string, n int, syncAlways bool) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	c := &Cluster{log: &warnLog{}}
	// Names of this process and attempt alone: test binaries start
	// clusters at once on ports found free, and a server that reached a
	// route port another binary took would join a cluster of the same
	// name (a different one is refused).
	name := fmt.Sprintf("ctxd-test-%d-%d", os.Getpid(), clusterN.Add(1))
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("%s-%d", name, i),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("n%d", i)),
			NoLog:      true,
			NoSigs:     true,
			// Small limits: the tests' streams are tiny.
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
			SyncAlways:         syncAlways,
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: ports[n+i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.opts = append(c.opts, o)
		c.servers = append(c.servers, nil)
	}
	for i := range n {
		if err := c.start(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	if err := c.WaitReady(30 * time.Second); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) start(i int) error {
	if err := os.MkdirAll(c.opts[i].StoreDir, 0o700); err != nil {
		return err
	}
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		return fmt.Errorf("nats server %d: %w", i, err)
	}
	s.SetLogger(serverLogger{log: c.log, server: i}, false, false)
	go s.Start()
	if !s.ReadyForConnections(Scale(10 * time.Second)) {
		s.Shutdown()
		return fmt.Errorf("nats server %d did not start", i)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// URLs returns the client URLs of every server, running or not.
func (c *Cluster) URLs() []string {
	var u []string
	for _, o := range c.opts {
		u = append(u, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return u
}

// Warnings returns the servers' last warnings and errors (at most 50,
// oldest first, each "server i: line"): what a test reports when the
// cluster refused it, as the servers log nothing otherwise.
func (c *Cluster) Warnings() []string { return c.log.lines() }

// clusterN numbers the clusters a test binary starts.
var clusterN atomic.Int64

// warnLog keeps the last warnLines warnings and errors of a cluster's
// servers.
type warnLog struct {
	mu   sync.Mutex
	last []string
}

const warnLines = 50

func (w *warnLog) add(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = append(w.last, line)
	if len(w.last) > warnLines {
		w.last = append(w.last[:0], w.last[len(w.last)-warnLines:]...)
	}
}

func (w *warnLog) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.last...)
}

// serverLogger is a server's logger (server.Logger): warnings, errors and
// fatal errors go to the cluster's warnLog, the rest nowhere.
type serverLogger struct {
	log    *warnLog
	server int
}

func (l serverLogger) put(format string, v []any) {
	l.log.add(fmt.Sprintf("server %d: ", l.server) + fmt.Sprintf(format, v...))
}

func (l serverLogger) Noticef(string, ...any)         {}
func (l serverLogger) Debugf(string, ...any)          {}
func (l serverLogger) Tracef(string, ...any)          {}
func (l serverLogger) Warnf(format string, v ...any)  { l.put(format, v) }
func (l serverLogger) Errorf(format string, v ...any) { l.put(format, v) }
func (l serverLogger) Fatalf(format string, v ...any) { l.put(format, v) }

// Index returns the index of the server named name (a stream's or a
// group's leader, as JetStream reports it); false for a name of no
// server of c.
func (c *Cluster) Index(name string) (int, bool) {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i, true
		}
	}
	return 0, false
}

// Kill stops server i at once (its store stays, for Restart).
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts server i again on its store and ports.
func (c *Cluster) Restart(i int) error { return c.start(i) }

// WaitReady waits until the cluster can place streams: every running
// server has JetStream enabled, one of them is the meta leader, every one
// is current with it and the leader counts every running server as a
// peer, and a client can create (then delete) a stream with as many
// replicas as servers run. timeout is scaled by Scale. Errors: the last
// reason the cluster was not ready, once the scaled timeout passed.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	timeout = Scale(timeout)
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = c.ready(time.Until(deadline)); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nats cluster not ready after %v: %w", timeout, last)
}

// probeN numbers ready's probe streams.
var probeN atomic.Int64

// ready is one check of WaitReady; the client probe may take up to
// budget (at most 10 s).
func (c *Cluster) ready(budget time.Duration) error {
	c.mu.Lock()
	servers := append([]*server.Server(nil), c.servers...)
	c.mu.Unlock()
	running, leaders := 0, 0
	var leader *server.Server
	for i, s := range servers {
		if s == nil {
			continue
		}
		running++
		if !s.JetStreamEnabled() {
			return fmt.Errorf("server %d: jetstream not enabled", i)
		}
		if len(servers) > 1 {
			if !s.JetStreamIsCurrent() {
				return fmt.Errorf("server %d: jetstream not current", i)
			}
			if s.JetStreamIsLeader() {
				leaders++
				leader = s
			}
		}
	}
	if running == 0 {
		return errors.New("no server running")
	}
	if len(servers) > 1 {
		if leaders != 1 {
			return fmt.Errorf("%d jetstream meta leaders among %d running servers, want 1", leaders, running)
		}
		if peers := len(leader.JetStreamClusterPeers()); peers < running {
			return fmt.Errorf("the meta leader knows %d peers, want %d", peers, running)
		}
	}
	nc, err := nats.Connect(strings.Join(c.URLs(), ","))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(max(budget, time.Second), 10*time.Second))
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return err
	}
	// Every running server must be a placement peer: create (and remove)
	// a stream with as many replicas, named for this probe alone (tests
	// wait on the shared cluster at once).
	n := probeN.Add(1)
	name := fmt.Sprintf("NATSTEST_PROBE_%d", n)
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{fmt.Sprintf("natstest.probe.%d", n)}, Replicas: running, Storage: jetstream.MemoryStorage}); err != nil {
		return err
	}
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}

// Shutdown stops every server.
func (c *Cluster) Shutdown() {
	for i := range c.servers {
		c.Kill(i)
	}
}

// ErrNoCluster is returned by Shared when the shared cluster failed to
// start.
var ErrNoCluster = errors.New("no nats cluster")

var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedErr  error
	sharedDir  string
)

// Shared returns one 3-server cluster per test binary, started on first
// use in a temporary directory (tests isolate themselves by name prefix).
// Call StopShared from TestMain after m.Run.
func Shared() (*Cluster, error) {
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "ctxd-nats-")
		if sharedErr == nil {
			shared, sharedErr = Start(sharedDir, 3)
		}
	})
	if sharedErr != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCluster, sharedErr)
	}
	return shared, nil
}

// StopShared stops the shared cluster, if started, and removes its stores.
func StopShared() {
	if shared != nil {
		shared.Shutdown()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
}
