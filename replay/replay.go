// Package replay runs a recorded agent session through ctxd as if the agent
// were connected: for each assistant response a pre-send check,
// then the response appended with its recorded usage (the post-check), then
// the messages that follow it — in process, on an embedded badger store, with
// the configured summarizer (the extractive one by default). It reports where
// ctxd compacted against where the original agent did, the estimate's error
// against recorded usage, and whether every request ctxd assembled was valid
// and append-only between recorded rewrites.
package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/transcript"
	"github.com/ctxd/ctxd/workers"
)

// ErrNoContextLimit: neither the options, the transcript nor the model
// catalog give the session's context window.
var ErrNoContextLimit = errors.New("no context limit: give --context-limit (the transcript records none and its model is not in the model catalog)")

// SessionID is the id of the session a replay creates.
const SessionID = "replay"

// Options configure a replay.
type Options struct {
	// Config is the effective configuration (defaults and --config layers).
	Config config.Config
	// ContextLimit overrides the context window, in tokens; 0 takes the
	// transcript's (Codex records it), else the model catalog's.
	ContextLimit uint64
	// DataDir holds the badger store and offload files; "" uses a temporary
	// directory removed afterwards.
	DataDir string
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// Progress, when set, is called after each message with the number of
	// messages replayed and the total.
	Progress func(done, total int)
	// Timeline, when set, is called for each step worth showing a person
	// (compactions, passes, offloads), in order.
	Timeline func(Step)
}

// Step is one line of the human timeline.
type Step struct {
	// Response is the number of assistant responses before the step.
	Response int
	// Kind is "compaction", "context_edit", "offload", "abandoned_round" or
	// "original_compaction".
	Kind string
	// Text describes it.
	Text string
}

// Env is an engine over a store in a directory: what replay and `ctxd
// compact --transcript` run on.
type Env struct {
	Engine *engine.Engine
	dir    string
	temp   bool
	lock   *os.File // held on a temporary directory while in use
	db     interface{ Close() error }
	log    *checkpoint.Store
	arts   *artifacts.Store
	cancel context.CancelFunc
	done   chan struct{}
}

// Open starts an engine over an embedded badger store in dataDir ("" for a
// temporary directory), with a worker pool of one. hook, when not nil,
// receives every summarizer request. Close stops it.
func Open(cfg config.Config, dataDir string, logger *slog.Logger, hook func(string, []history.Message)) (*Env, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	env := &Env{dir: dataDir, done: make(chan struct{})}
	if env.dir == "" {
		d, lock, err := stableTempDir()
		if err != nil {
			return nil, err
		}
		env.dir, env.temp, env.lock = d, true, lock
	}
	// A throwaway store needs no sync per append; a kept one does.
	db, err := store.Open(filepath.Join(env.dir, "db"), store.Options{SyncWrites: !env.temp && cfg.Storage.SyncWrites, Logger: logger})
	if err != nil {
		env.cleanup()
		return nil, err
	}
	env.db = db
	// A throwaway store uses a fixed artifact secret: artifact URIs appear
	// in offload stubs, and random ids would change the token counts of two
	// replays of the same file. Nobody else reads that store.
	secret := bytes.Repeat([]byte{0x5a}, artifacts.SecretSize)
	if !env.temp {
		if secret, err = artifacts.LoadSecret(env.dir); err != nil {
			env.Close()
			return nil, err
		}
	}
	env.arts, err = artifacts.Open(db, secret)
	if err != nil {
		env.Close()
		return nil, err
	}
	env.log = checkpoint.Open(db, checkpoint.Options{})
	pool, err := workers.New(workers.Options{Size: 1, Queue: 4, DrainTimeout: time.Minute})
	if err != nil {
		env.Close()
		return nil, err
	}
	if cfg.Offload.Dir == "" {
		cfg.Offload.Dir = filepath.Join(env.dir, "offload")
	}
	env.Engine, err = engine.New(engine.Options{
		Config:              cfg,
		Log:                 env.log,
		Artifacts:           env.arts,
		Summarizer:          summarizer.New(summarizer.Options{Logger: logger}),
		Pool:                pool,
		Logger:              logger,
		OnSummarizerRequest: hook,
	})
	if err != nil {
		env.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	env.cancel = cancel
	go func() { _ = pool.Run(ctx); close(env.done) }()
	return env, nil
}

// stableTempDir creates the first free directory of os.TempDir()/
// ctxd-replay-0, -1, …: the offload stubs of a replay carry its path, so two
// replays of one file run one after the other see the same path and print
// the same report, where os.MkdirTemp's random name changed the
// stubs' token counts. Concurrent replays get different numbers. The
// replay holds the returned lock while it runs; a directory left by a
// killed replay (its lock free) is emptied and reused, so that a crash
// does not shift every later replay to another path.
func stableTempDir() (string, *os.File, error) {
	for n := 0; n < 1000; n++ {
		d := filepath.Join(os.TempDir(), fmt.Sprintf("ctxd-replay-%d", n))
		err := os.Mkdir(d, 0o700)
		if err == nil {
			lock, err := lockNew(d)
			if err != nil {
				_ = os.RemoveAll(d)
				return "", nil, err
			}
			return d, lock, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", nil, err
		}
		if lock := reclaim(d); lock != nil {
			return d, lock, nil
		}
	}
	d, err := os.MkdirTemp("", "ctxd-replay-*")
	return d, nil, err
}

// Dir is the data directory in use.
func (env *Env) Dir() string { return env.dir }

// Close drains the pool, closes the stores and removes a temporary
// directory.
func (env *Env) Close() error {
	if env.cancel != nil {
		env.cancel()
		<-env.done
		env.cancel = nil
	}
	var errs []error
	if env.log != nil {
		errs = append(errs, env.log.Close())
	}
	if env.arts != nil {
		errs = append(errs, env.arts.Close())
	}
	if env.db != nil {
		errs = append(errs, env.db.Close())
	}
	env.cleanup()
	return errors.Join(errs...)
}

func (env *Env) cleanup() {
	if env.temp {
		_ = os.RemoveAll(env.dir)
	}
	if env.lock != nil {
		_ = env.lock.Close()
		env.lock = nil
	}
}

// openSession opens an engine (see Open) and creates the session tr is
// replayed into, with the context window ContextLimit resolves. The caller
// closes the Env. Errors: ErrNoContextLimit, Open's, the engine's.
func openSession(ctx context.Context, cfg config.Config, tr *transcript.Transcript, opts Options, hook func(string, []history.Message)) (*Env, engine.Info, error) {
	limit, err := ContextLimit(cfg, opts.ContextLimit, tr.ContextLimit, tr.Model)
	if err != nil {
		return nil, engine.Info{}, err
	}
	env, err := Open(cfg, opts.DataDir, opts.Logger, hook)
	if err != nil {
		return nil, engine.Info{}, err
	}
	info, err := env.Engine.CreateSession(ctx, engine.CreateParams{ID: SessionID, Model: tr.Model, ContextLimit: limit, System: tr.System})
	if errors.Is(err, engine.ErrExists) {
		err = fmt.Errorf("data dir %s already holds a replay (session %q): give --data-dir an empty or new directory, or remove this one: %w", opts.DataDir, SessionID, err)
	}
	if err != nil {
		env.Close()
		return nil, engine.Info{}, err
	}
	return env, info, nil
}

// ContextLimit resolves the context window of a replay: the
// override, else the transcript's, else the model catalog's.
// Errors: ErrNoContextLimit.
func ContextLimit(cfg config.Config, override, recorded uint64, model string) (uint64, error) {
	switch {
	case override > 0:
		return override, nil
	case recorded > 0:
		return recorded, nil
	}
	if m, ok := cfg.Model(model); ok && m.ContextLimit > 0 {
		return m.ContextLimit, nil
	}
	return 0, fmt.Errorf("%w (model %q)", ErrNoContextLimit, model)
}
