// Package natsstore is ctxd's fleet backend on NATS JetStream (docs/design.md
// §9, `[storage] backend = "nats"`): every node of a fleet shares one
// cluster, and any node serves any session. It implements the engine's
// interfaces with the official client (github.com/nats-io/nats.go and its
// jetstream package), with no replication, leader election or queue code of
// its own:
//
//   - Log (checkpoint.Log): one stream, <P>_EVENTS, a subject per session
//     (<p>.ev.<hex id>); an append is one message published with the
//     expected last subject sequence, acknowledged once the stream stored
//     it at its replication factor; checkpoints are records of the same
//     subject, under the same rule;
//   - session metadata, listing rows and the artifact secret: the KV bucket
//     <P>_META, updated by revision (compare-and-set);
//   - Artifacts (artifacts.Backend): the object store <P>_ARTIFACTS, named
//     by keyed id;
//   - Queue: compaction jobs on the work-queue stream <P>_JOBS with one
//     durable pull consumer shared by every node, de-duplicated by message
//     id (session, snapshot seq), redelivered after AckWait when a node dies.
//
// Everything is created idempotently by Open.
package natsstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/checkpoint"
)

// Options configure Open. Servers is required.
type Options struct {
	// Servers are the cluster's client URLs (nats://host:port).
	Servers []string
	// CredentialsFile is a NATS .creds file (JWT and NKey seed); "" for
	// none.
	CredentialsFile string
	// Token is an authentication token; "" for none.
	Token string
	// Replicas is the replication factor of every stream and bucket: 1, 3
	// or 5 (3 in production). 0 means 1.
	Replicas int
	// Prefix names ctxd's streams and buckets (<PREFIX>_EVENTS …) and
	// subjects (<prefix>.ev.…): letters, digits, '-' and '_'. "" means
	// "ctxd". Fleets sharing a cluster use different prefixes.
	Prefix string
	// AckWait is how long a compaction job may run without a progress
	// signal before JetStream redelivers it to another node; the node
	// running a job signals every AckWait/4 (an in-progress
	// acknowledgement), however long the job takes. 0 means 30 seconds.
	AckWait time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives what fails in the background; nil means
	// slog.Default().
	Logger *slog.Logger
	// Name is the client connection's name (shown by the servers); "" means
	// "ctxd".
	Name string

	// noBatches publishes every record alone (the benchmark's baseline).
	noBatches bool
}

// Store is one node's connection to the cluster with the streams and
// buckets ctxd uses. Safe for concurrent use; Close it last.
type Store struct {
	opts    Options
	nc      *nats.Conn
	js      jetstream.JetStream
	events  jetstream.Stream
	meta    jetstream.KeyValue
	objects jetstream.ObjectStore
	jobs    jetstream.Stream

	// The streams under meta and objects, for reads the buckets' API
	// would serve from an ordered consumer on any replica (leader.go).
	metaStream, objStream jetstream.Stream
	// pjs is nats.go's older JetStream API, for chunksByConsumer's
	// ordered push consumer (as the object store's own Get uses).
	pjs nats.JetStreamContext

	prefix string // subject prefix (lower case)
	log    *Log

	servers []string   // opts.Servers without userinfo, for errors and Status
	downMu  sync.Mutex // guards downAt, downErr
	downAt  time.Time  // when the connection was lost; zero while connected
	downErr string     // why, redacted
	// lost is closed when the connection is lost and replaced when it is
	// back (guarded by downMu): whileUp's contexts end on it.
	lost chan struct{}
}

// whileUp returns a context that ends when ctx does or when the
// connection to the cluster is lost, and the function that releases it.
// A request made in the instant before the client noticed an outage would
// otherwise wait out its whole time limit on a connection that is gone;
// the caller turns the cancellation into up's error (ErrUnavailable).
func (st *Store) whileUp(ctx context.Context) (context.Context, context.CancelFunc) {
	st.downMu.Lock()
	lost := st.lost
	st.downMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// up returns nil while the connection to the cluster is up, else an error
// wrapping checkpoint.ErrUnavailable that names the backend and its
// servers ("storage: nats: no servers available …"). Every operation
// checks it first, so that a request during an outage is answered within
// reconnectGrace (503 from the daemon) rather than when its time limit runs
// out, while a failover of a moment is ridden out.
func (st *Store) up() error {
	for start := time.Now(); !st.nc.IsConnected(); time.Sleep(20 * time.Millisecond) {
		// A connection lost moments ago is usually failing over to
		// another server (a rolling restart): wait for it, at most
		// reconnectGrace from the loss and from this call.
		st.downMu.Lock()
		since := st.downAt
		st.downMu.Unlock()
		young := since.IsZero() || st.opts.Now().Sub(since) < reconnectGrace
		if st.nc.IsClosed() || !young || time.Since(start) >= reconnectGrace {
			return st.downError()
		}
	}
	return nil
}

// reconnectGrace is how long after the connection to the cluster is lost
// an operation waits for it to come back before it is refused: a failover
// to another server takes a fraction of it; an outage that lasts longer
// is refused at once.
const reconnectGrace = 2 * time.Second

// downError is the error of an operation refused while the connection is
// down (up).
func (st *Store) downError() error {
	state := strings.ToLower(st.nc.Status().String())
	st.downMu.Lock()
	since := st.downAt
	st.downMu.Unlock()
	when := ""
	if !since.IsZero() {
		when = " since " + since.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("%w: storage: nats: no servers available (connection %s%s; servers %s); nothing was done, try again when the cluster is back",
		checkpoint.ErrUnavailable, state, when, strings.Join(st.servers, ", "))
}

// disconnected is the connection's disconnect handler: it logs the start
// of an outage once.
func (st *Store) disconnected(nc *nats.Conn, err error) {
	st.downMu.Lock()
	first := st.downAt.IsZero()
	if first {
		close(st.lost)
		st.downAt = st.opts.Now()
		st.downErr = ""
		if err != nil {
			st.downErr = redactText(err.Error(), st.opts.Servers)
		}
	}
	st.downMu.Unlock()
	if first && !nc.IsClosed() {
		st.opts.Logger.Warn("storage: nats: connection to the cluster lost; requests are refused (503 unavailable) until it is back",
			"servers", strings.Join(st.servers, ","), "err", st.downErr)
	}
}

// reconnected is the connection's reconnect handler: it logs the end of
// an outage once, with its length.
func (st *Store) reconnected(nc *nats.Conn) {
	st.downMu.Lock()
	since := st.downAt
	if !since.IsZero() {
		st.lost = make(chan struct{})
	}
	st.downAt, st.downErr = time.Time{}, ""
	st.downMu.Unlock()
	attrs := []any{"server", nc.ConnectedUrlRedacted()}
	if !since.IsZero() {
		attrs = append(attrs, "outage", st.opts.Now().Sub(since).Round(time.Millisecond).String())
	}
	st.opts.Logger.Info("storage: nats: connection to the cluster is back", attrs...)
}

// Status is what a node reports of its connection to the cluster (GET
// /v1/status, ctxctl status and doctor).
type Status struct {
	// Servers are the configured client URLs without userinfo.
	Servers []string
	// State is the connection's state, lower case: "connected",
	// "reconnecting", "connecting", "disconnected" or "closed".
	State string
	// ConnectedServer is the URL of the server this node is connected to
	// (userinfo redacted); "" while not connected.
	ConnectedServer string
	// DownSince is when the connection was lost; zero while connected.
	DownSince time.Time
	// LastError is why it was lost (redacted); "" while connected.
	LastError string
	// Prefix, Replicas: Options.Prefix and Options.Replicas in effect.
	Prefix   string
	Replicas int
	// EventsStream, JobsStream are the streams' names; MetaBucket the
	// key-value bucket's; ArtifactsBucket the object store's.
	EventsStream, JobsStream, MetaBucket, ArtifactsBucket string
}

// Status reports the connection and the names of ctxd's streams and
// buckets; it does no I/O. It never shows credentials: userinfo is cut
// from every URL, the token and credentials file are not reported.
func (st *Store) Status() Status {
	up := strings.ToUpper(st.opts.Prefix)
	s := Status{
		Servers:         slices.Clone(st.servers),
		State:           strings.ToLower(st.nc.Status().String()),
		Prefix:          st.opts.Prefix,
		Replicas:        st.opts.Replicas,
		EventsStream:    up + "_EVENTS",
		JobsStream:      up + "_JOBS",
		MetaBucket:      up + "_META",
		ArtifactsBucket: up + "_ARTIFACTS",
	}
	if st.nc.IsConnected() {
		s.ConnectedServer = st.nc.ConnectedUrlRedacted()
		return s
	}
	st.downMu.Lock()
	s.DownSince, s.LastError = st.downAt, st.downErr
	st.downMu.Unlock()
	return s
}

// redactURLs returns the URLs with any userinfo (user:password@ or a
// token@) removed; a URL that does not parse is replaced by a placeholder,
// as it may hold a secret in a shape not recognised.
func redactURLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redactURL(u)
	}
	return out
}

func redactURL(raw string) string {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(unparsable server URL)"
	}
	u.User = nil
	u.RawQuery, u.Fragment = "", ""
	return u.String()
}

// redactText replaces every configured server URL in s by its redacted
// form, and cuts any remaining "user:pass@" of a URL.
func redactText(s string, servers []string) string {
	for _, raw := range servers {
		if r := redactURL(raw); r != raw {
			s = strings.ReplaceAll(s, raw, r)
		}
	}
	return userinfoRE.ReplaceAllString(s, "$1")
}

// userinfoRE matches the userinfo of a URL in text ("nats://u:p@").
var userinfoRE = regexp.MustCompile(`([a-z]+://)[^/@\s]+@`)

// ErrInvalidOptions: Options that cannot work (no servers, a bad prefix or
// replica count).
var ErrInvalidOptions = errors.New("invalid nats options")

// ValidPrefix checks a name prefix: 1 to 32 characters from
// [A-Za-z0-9_-]. Errors wrap ErrInvalidOptions.
func ValidPrefix(p string) error {
	if p == "" || len(p) > 32 {
		return fmt.Errorf("%w: prefix %q must be 1 to 32 characters", ErrInvalidOptions, p)
	}
	for i, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: prefix %q: character %q at byte %d is not one of [A-Za-z0-9_-]", ErrInvalidOptions, p, c, i)
		}
	}
	return nil
}

// Open connects to the cluster and creates (or updates to this
// configuration) the streams, buckets and consumer ctxd uses. Errors:
// ErrInvalidOptions, the connection's, JetStream's (for example fewer
// servers than Replicas).
func Open(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Servers) == 0 {
		return nil, fmt.Errorf("%w: no servers", ErrInvalidOptions)
	}
	if opts.Prefix == "" {
		opts.Prefix = "ctxd"
	}
	if err := ValidPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas != 1 && opts.Replicas != 3 && opts.Replicas != 5 {
		return nil, fmt.Errorf("%w: replicas %d: want 1, 3 or 5", ErrInvalidOptions, opts.Replicas)
	}
	if opts.AckWait == 0 {
		opts.AckWait = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Name == "" {
		opts.Name = "ctxd"
	}
	st := &Store{opts: opts, prefix: strings.ToLower(opts.Prefix), servers: redactURLs(opts.Servers), lost: make(chan struct{})}
	copts := []nats.Option{
		nats.Name(opts.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		// One line when the connection is lost and one when it is back:
		// an outage is logged once, however many requests it refuses.
		nats.DisconnectErrHandler(st.disconnected),
		nats.ReconnectHandler(st.reconnected),
	}
	if opts.CredentialsFile != "" {
		copts = append(copts, nats.UserCredentials(opts.CredentialsFile))
	}
	if opts.Token != "" {
		copts = append(copts, nats.Token(opts.Token))
	}
	nc, err := nats.Connect(strings.Join(opts.Servers, ","), copts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	st.nc = nc
	if err := st.setup(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	st.log = newLog(st)
	return st, nil
}

func (st *Store) setup(ctx context.Context) error {
	js, err := jetstream.New(st.nc)
	if err != nil {
		return err
	}
	st.js = js
	if st.pjs, err = st.nc.JetStream(); err != nil {
		return err
	}
	up := strings.ToUpper(st.opts.Prefix)
	r := st.opts.Replicas
	if st.events, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        up + "_EVENTS",
		Description: "ctxd session event logs, a subject per session",
		Subjects:    []string{st.prefix + ".ev.>"},
		Storage:     jetstream.FileStorage,
		Replicas:    r,
		// Reads go to the stream's leader, which has every acknowledged
		// record: a direct get may be answered by a replica that lags, and
		// a node must never act on a session without the records others
		// appended (docs/design.md §9).
		AllowDirect: false,
		// Appends of several sessions at once go as one atomic batch
		// (batch.go); a server that does not know the setting ignores
		// it, and appends are published one by one.
		AllowAtomicPublish: true,
	}); err != nil {
		return fmt.Errorf("create stream %s_EVENTS: %w", up, err)
	}
	if st.meta, err = st.keyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      up + "_META",
		Description: "ctxd session metadata, listing rows, artifact secret",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    r,
	}); err != nil {
		return fmt.Errorf("create key-value bucket %s_META: %w", up, err)
	}
	if st.metaStream, err = js.Stream(ctx, "KV_"+up+"_META"); err != nil {
		return fmt.Errorf("open key-value bucket %s_META's stream: %w", up, err)
	}
	if st.objects, err = st.objectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      up + "_ARTIFACTS",
		Description: "ctxd artifacts by keyed id",
		Storage:     jetstream.FileStorage,
		Replicas:    r,
	}); err != nil {
		return fmt.Errorf("create object store %s_ARTIFACTS: %w", up, err)
	}
	if st.objStream, err = js.Stream(ctx, "OBJ_"+up+"_ARTIFACTS"); err != nil {
		return fmt.Errorf("open object store %s_ARTIFACTS's stream: %w", up, err)
	}
	if st.jobs, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        up + "_JOBS",
		Description: "ctxd compaction jobs (work queue)",
		Subjects:    []string{st.prefix + ".jobs.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    r,
		Duplicates:  10 * time.Minute,
		// One job per session queued or running in the whole fleet
		// (docs/design.md §8a): a second is refused while the first is unacked.
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
	}); err != nil {
		return fmt.Errorf("create stream %s_JOBS: %w", up, err)
	}
	if _, err := st.jobs.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       st.consumerName(),
		Description:   "every ctxd node's compaction workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       st.opts.AckWait,
		MaxAckPending: 4096,
		Replicas:      r,
	}); err != nil {
		return fmt.Errorf("create consumer %s: %w", st.consumerName(), err)
	}
	return nil
}

// keyValue opens the bucket, creating it when missing, with reads from
// its stream's leader (leaderReads).
func (st *Store) keyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if _, err := st.js.KeyValue(ctx, cfg.Bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
		if _, err := st.js.CreateKeyValue(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if err := st.leaderReads(ctx, "KV_"+cfg.Bucket); err != nil {
		return nil, err
	}
	return st.js.KeyValue(ctx, cfg.Bucket) // bound after: it reads the stream's AllowDirect
}

// objectStore is keyValue for the object store.
func (st *Store) objectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if _, err := st.js.ObjectStore(ctx, cfg.Bucket); errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := st.js.CreateObjectStore(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if err := st.leaderReads(ctx, "OBJ_"+cfg.Bucket); err != nil {
		return nil, err
	}
	return st.js.ObjectStore(ctx, cfg.Bucket)
}

// leaderReads turns off direct gets on stream name (buckets are created
// with them on): a direct get may be answered by a lagging replica, so a
// value just written could read as missing on another node.
func (st *Store) leaderReads(ctx context.Context, name string) error {
	s, err := st.js.Stream(ctx, name)
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect {
		return nil
	}
	cfg.AllowDirect = false
	_, err = st.js.UpdateStream(ctx, cfg)
	return err
}

func (st *Store) consumerName() string { return st.prefix + "-compactor" }

// Log returns the event log of this store (checkpoint.Log).
func (st *Store) Log() *Log { return st.log }

// Close stops the log's background writes and closes the connection after
// flushing what it buffered.
func (st *Store) Close() error {
	st.log.close()
	if err := st.nc.Drain(); err != nil {
		st.nc.Close()
		return err
	}
	for st.nc.IsDraining() {
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Remove deletes every stream and bucket of prefix (and so every session,
// artifact and queued job of that fleet) from the cluster at servers: for
// decommissioning a fleet, and for tests. Missing ones are skipped.
// Errors: the connection's, JetStream's.
func Remove(ctx context.Context, servers []string, prefix string) error {
	nc, err := nats.Connect(strings.Join(servers, ","))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	up := strings.ToUpper(prefix)
	var errs []error
	for _, name := range []string{up + "_EVENTS", up + "_JOBS"} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, err)
		}
	}
	if err := js.DeleteKeyValue(ctx, up+"_META"); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		errs = append(errs, err)
	}
	if err := js.DeleteObjectStore(ctx, up+"_ARTIFACTS"); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
