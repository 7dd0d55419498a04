package natstest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/natsstore"
)

// Deadlines of the harness before Scale: a whole OpenStore (every try and
// the waits between them), one try of natsstore.Open, and the wait for
// the cluster to be ready again between tries. They are generous: under
// `go test ./...` every package's test binary starts at once on a small
// machine, and an R3 stream's first placement has missed 30 s (CI).
const (
	openTimeout  = 3 * time.Minute
	tryTimeout   = time.Minute
	readyTimeout = time.Minute
)

// Scale returns d times the harness's deadline factor: the number in
// CTXD_TEST_TIMEOUT_SCALE when it is set (a positive decimal, for a slow
// or crowded machine), otherwise 2 under the race detector (which slows
// the servers several times) and 1 without it.
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * scaleFactor())
}

func scaleFactor() float64 {
	if v := os.Getenv("CTXD_TEST_TIMEOUT_SCALE"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return f
		}
	}
	if raceEnabled {
		return 2
	}
	return 1
}

// startupErr reports whether err is what a cluster still settling answers
// (and so worth another try once it is ready): a deadline or timeout, no
// responders (JetStream not up yet on the server the client reached), or
// the JetStream API's "temporarily unavailable", "cluster can not handle
// request" (no meta leader), "no suitable peers", "insufficient resources"
// (peers not yet known) and "stream is offline"; and "error creating
// store for stream" (10049 with that description), which a fresh stream
// of a fixture's own name met once in CI, the server's file store refusing
// it for a reason it logged as a warning (Cluster.Warnings): another try
// places the stream again.
func startupErr(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10008, 10009, 10005, 10023, 10118:
			return true
		case 10049:
			return strings.Contains(api.Description, "error creating store for stream")
		}
	}
	return strings.Contains(strings.ToLower(err.Error()), "no leader")
}

// OpenStore opens a natsstore.Store on c with opts (opts.Servers defaults
// to c's URLs) and returns once every stream of the store has a leader.
// A try that fails as a cluster still settling fails (startupErr) is made
// again after the cluster is ready (WaitReady), within Scale(3 minutes)
// in all. Errors: natsstore.Open's (at once when not a start-up error or
// when opts.Replicas exceeds the cluster's servers),
// WaitReady's, or a stream with no leader by the deadline.
func OpenStore(c *Cluster, opts natsstore.Options) (*natsstore.Store, error) {
	if len(opts.Servers) == 0 {
		opts.Servers = c.URLs()
	}
	deadline := time.Now().Add(Scale(openTimeout))
	var err error
	for time.Now().Before(deadline) {
		try := time.Now().Add(Scale(tryTimeout))
		if try.After(deadline) {
			try = deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), try)
		var st *natsstore.Store
		if st, err = natsstore.Open(ctx, opts); err == nil {
			err = waitLeaders(ctx, st, opts.Prefix)
			if err == nil {
				cancel()
				return st, nil
			}
			_ = st.Close()
		}
		cancel()
		// More replicas than servers can never be placed: no retry.
		if !startupErr(err) || opts.Replicas > len(c.opts) {
			return nil, err
		}
		if werr := c.WaitReady(min(readyTimeout, time.Until(deadline))); werr != nil {
			return nil, errors.Join(err, werr)
		}
	}
	return nil, fmt.Errorf("open nats store %q: still failing after %v: %w", opts.Prefix, Scale(openTimeout), err)
}

// waitLeaders waits until every stream of the store under prefix has a
// leader: a stream just created may not have one yet, and until it has,
// reads and writes on it time out (two nodes starting together saw a key
// one had created as missing).
func waitLeaders(ctx context.Context, st *natsstore.Store, prefix string) error {
	if prefix == "" {
		prefix = "ctxd"
	}
	js, err := jetstream.New(st.Conn())
	if err != nil {
		return err
	}
	up := strings.ToUpper(prefix)
	for _, name := range []string{up + "_EVENTS", up + "_JOBS", "KV_" + up + "_META", "OBJ_" + up + "_ARTIFACTS"} {
		for {
			s, err := js.Stream(ctx, name)
			if err == nil && (s.CachedInfo().Cluster == nil || s.CachedInfo().Cluster.Leader != "") {
				break
			}
			if err == nil {
				err = fmt.Errorf("stream %s has no leader", name)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", err, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Main runs a package's tests and then stops the shared cluster, if they
// started it: call it as a package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

var fixtureN atomic.Int64

// Fixture is one test harness's store on the shared cluster: R1 streams
// and buckets under a prefix of its own (docs/design.md §9), as the engine and
// server suites use under CTXD_TEST_BACKEND=nats.
type Fixture struct {
	Store     *natsstore.Store
	Artifacts *natsstore.Artifacts
	// Close closes the store and, for a fixture opened with no dir,
	// removes its streams and buckets; in that order.
	Close []func()
}

// OpenFixture opens a Fixture on the shared cluster, artifacts keyed with
// secret (artifacts.SecretSize bytes), the store logging to logger. A
// fixture opened with the same non-empty dir (a harness restarted on its
// data directory) gets the same prefix, hence the same sessions, and
// keeps them at Close; with dir "" it gets a fresh prefix, removed at
// Close. It fails t when the cluster or the store cannot be opened.
func OpenFixture(t testing.TB, dir string, secret []byte, logger *slog.Logger) Fixture {
	t.Helper()
	c, err := Shared()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("f%d", fixtureN.Add(1))
	if dir != "" {
		sum := sha256.Sum256([]byte(dir))
		prefix = "d" + hex.EncodeToString(sum[:6])
	}
	st, err := OpenStore(c, natsstore.Options{Prefix: prefix, Replicas: 1, Logger: logger})
	if err != nil {
		t.Fatalf("%v\nthe servers' last warnings:\n%s", err, strings.Join(c.Warnings(), "\n"))
	}
	arts, err := st.Artifacts(secret)
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	for _, w := range c.Warnings() {
		// A try refused as above: the cause, for the record.
		if strings.Contains(w, "Stream create failed") && strings.Contains(w, strings.ToUpper(prefix)+"_") {
			t.Logf("the store of %s was opened on another try; a server had warned: %s", prefix, w)
		}
	}
	f := Fixture{Store: st, Artifacts: arts, Close: []func(){func() { _ = st.Close() }}}
	if dir == "" {
		f.Close = append(f.Close, func() {
			ctx, cancel := context.WithTimeout(context.Background(), Scale(30*time.Second))
			defer cancel()
			_ = natsstore.Remove(ctx, c.URLs(), prefix)
		})
	}
	return f
}
