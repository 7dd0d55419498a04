// Package engine owns a session's life (docs/design.md §1): appends and their
// validation, abandoned rounds, token estimates, the assembled context (§4),
// and compaction — the trigger signals, the worker pool, retention, the
// checkpoint, the failure circuit and stalls (§5) — with every step recorded
// in the session's event log. It parses no HTTP.
package engine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// Errors of this package. Every error the Engine returns wraps one of them
// (or is the caller's context error); each carries the api code it answers
// as (api.ErrorCoder), so the server needs no table of its own.
var (
	// ErrNotFound: the session does not exist (api.NotFound).
	ErrNotFound error = api.NewCoded(api.NotFound, "not found")
	// ErrExists: a session with that id exists (api.Conflict).
	ErrExists error = api.NewCoded(api.Conflict, "already exists")
	// ErrInvalid: bad input; nothing was stored (api.Invalid; the message
	// without the "invalid: " the error begins with). A *FieldError names
	// the field.
	ErrInvalid error = api.NewCoded(api.Invalid, "invalid").Answer(func(err error) *api.Error {
		return &api.Error{Code: api.Invalid, Message: invalidMessage(err, "")}
	})
	// ErrConflict: the request cannot be served in the session's state,
	// such as a compaction while a tool call waits on its result
	// (api.Conflict, the message without the leading "conflict: ").
	ErrConflict error = api.NewCoded(api.Conflict, "conflict").Answer(func(err error) *api.Error {
		return &api.Error{Code: api.Conflict, Message: strings.TrimPrefix(err.Error(), "conflict: ")}
	})
	// ErrUnavailable: the compaction queue is full or the engine is
	// shutting down; try again later (api.Unavailable, the message without
	// the leading "unavailable: ").
	ErrUnavailable error = api.NewCoded(api.Unavailable, "unavailable").Answer(func(err error) *api.Error {
		return &api.Error{Code: api.Unavailable, Message: strings.TrimPrefix(err.Error(), "unavailable: ")}
	})
	// ErrProviderRule: the assembled context breaks a provider rule
	// (docs/design.md §4a) and was not returned; it wraps
	// history.ErrProviderRule. A bug of ctxd: logged and counted (it
	// carries no code: api.Internal).
	ErrProviderRule = history.ErrProviderRule
)

// FieldError is bad input in one field of a request: Field is its path
// ("messages[3].content[1].type"), Err wraps ErrInvalid (or another error
// carrying its code, such as checkpoint.ErrInvalid).
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return e.Field + ": " + e.Err.Error()
}

// Unwrap returns the cause, which wraps ErrInvalid.
func (e *FieldError) Unwrap() error { return e.Err }

// APIError answers e as its cause's code (api.Invalid when the cause
// carries none) with Field set, and the message: the field, then the
// cause without the "invalid: " the engine wraps in (a cause that already
// names the field is not prefixed again).
func (e *FieldError) APIError(error) *api.Error {
	code := api.Invalid
	if ae, ok := api.AsAPIError(e.Err); ok {
		code = ae.Code
	}
	return &api.Error{Code: code, Field: e.Field, Message: invalidMessage(e, e.Field)}
}

// invalidMessage is the message of an invalid-input error: the field, then
// the cause without the "invalid: " sentinel text the engine wraps in. A
// cause that already names the field as "FIELD: " (a configuration
// problem, "config: session overlay:3:1: summarizer.bindings: …") is not
// prefixed again.
func invalidMessage(err error, field string) string {
	msg := err.Error()
	if fe, ok := errors.AsType[*FieldError](err); ok && fe.Err != nil {
		msg = fe.Err.Error()
	}
	msg = strings.TrimPrefix(msg, "invalid: ")
	if field != "" && !strings.HasPrefix(msg, field) && !strings.Contains(msg, " "+field+": ") {
		msg = field + ": " + msg
	}
	return msg
}

func invalidField(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))}
}

// ArtifactStore is what the engine needs of the artifact store
// (artifacts.Store satisfies it).
type ArtifactStore interface {
	Retain(ctx context.Context, content []byte, format artifacts.Format) (artifacts.ID, error)
	Get(ctx context.Context, id artifacts.ID) ([]byte, artifacts.Format, error)
}

// Queue is the compaction queue as the engine uses it (docs/design.md §9: behind
// an interface). *workers.Pool, the local bounded pool, implements it.
type Queue interface {
	// SubmitPriority queues fn as the session's compaction, or joins the
	// one queued or running. Errors: workers.ErrQueueFull, workers.ErrClosed.
	SubmitPriority(session string, prio workers.Priority, fn workers.Func) (*workers.Ticket, error)
	// Active returns the session's queued or running job, nil when none.
	Active(session string) *workers.Ticket
	// Unwait tells the queue nobody waits on t any more.
	Unwait(t *workers.Ticket)
	// Ahead returns how many jobs requests wait on are queued ahead of
	// t's and whether t's is still queued (workers.Pool.Ahead).
	Ahead(t *workers.Ticket) (ahead int, queued bool)
	// Size is the number of jobs this node runs at once.
	Size() int
}

var _ Queue = (*workers.Pool)(nil)

// runningElsewhere reports whether another node of a fleet runs session
// id's compaction now (a Pool with a Running method: the fleet's queue).
func (e *Engine) runningElsewhere(id string) bool {
	r, ok := e.opts.Pool.(interface{ Running(session string) bool })
	return ok && r.Running(id)
}

// SharedQueue is a Queue shared by several nodes (docs/design.md §9): a job
// submitted on one node may run on another, which builds the job's work
// with the function given to SetJobs. The engine uses SubmitJob instead of
// SubmitPriority when its Pool is one.
type SharedQueue interface {
	Queue
	// SubmitJob queues the compaction of session for signal sig (a
	// trigger.Signal), or joins the one queued or running anywhere; fn is
	// the work when this node runs it. Errors: workers.ErrQueueFull,
	// workers.ErrClosed, the queue's.
	SubmitJob(session, sig string, prio workers.Priority, fn workers.Func) (*workers.Ticket, error)
	// SetJobs installs the function that builds the work of a job this
	// node takes from the queue.
	SetJobs(fn func(session, sig string) workers.Func)
}

// Metrics receives what the engine measures; the daemon backs it with
// Prometheus. Implementations must be safe for concurrent use.
type Metrics interface {
	// Appended counts messages appended.
	Appended(n int)
	// Compaction counts a finished compaction by outcome: "ok", "stalled"
	// or "failed".
	Compaction(outcome string)
	// SummarizerCall observes one summarizer call of a binding.
	SummarizerCall(binding string, d time.Duration, err error)
	// CircuitOpened counts a session whose circuit opened.
	CircuitOpened()
	// ProviderRuleViolation counts an assembled context that broke a
	// provider rule (docs/design.md §4a), by rule name (history.Rule*): a bug,
	// and the context was not returned.
	ProviderRuleViolation(rule string)
	// OffloadFailed counts a tool result kept whole because its offload
	// could not be written (docs/design.md §6).
	OffloadFailed()
	// Ledger counts one savings-ledger entry (docs/design.md §10).
	Ledger(en ledger.Entry)
}

type noMetrics struct{}

func (noMetrics) Appended(int)                                {}
func (noMetrics) Compaction(string)                           {}
func (noMetrics) SummarizerCall(string, time.Duration, error) {}
func (noMetrics) CircuitOpened()                              {}
func (noMetrics) ProviderRuleViolation(string)                {}
func (noMetrics) OffloadFailed()                              {}
func (noMetrics) Ledger(ledger.Entry)                         {}

// Options configure an Engine. Log, Artifacts, Summarizer and Pool are
// required.
type Options struct {
	// Config is the daemon's effective configuration (without any
	// session's overlay).
	Config config.Config
	// Log stores sessions, events and checkpoints.
	Log checkpoint.Log
	// Artifacts keeps tool results for offloading and the pruned retry.
	Artifacts ArtifactStore
	// Summarizer runs the summarizer calls.
	Summarizer *summarizer.Summarizer
	// Pool runs compactions; the caller runs it (a *workers.Pool: Pool.Run).
	Pool Queue
	// Shared says other nodes write the same Log (the NATS backend,
	// docs/design.md §9): before acting on a loaded session the engine reads the
	// log's last seq and reloads the session when another node appended.
	Shared bool
	// Logger receives the engine's logs; nil means slog.Default().
	Logger *slog.Logger
	// Metrics receives measurements; nil means none.
	Metrics Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OffloadDir is where offloaded tool results are written; "" means
	// <storage.data_dir>/offload.
	OffloadDir string
	// OnSummarizerRequest, when set, is called with the messages of every
	// summarizer request before it is sent (replay checks them).
	OnSummarizerRequest func(session string, msgs []history.Message)
	// MaxLoadedSessions bounds the sessions kept in memory; beyond it the
	// least recently used idle ones are dropped and reloaded from the log on
	// their next request. 0 means DefaultMaxLoadedSessions.
	MaxLoadedSessions int
}

// DefaultMaxLoadedSessions is the default bound on sessions kept in memory.
// A loaded session holds its active history; an idle fleet of thousands of
// sessions must stay small, and a reload replays the session's log.
const DefaultMaxLoadedSessions = 512

// Engine runs every session of a daemon. It is safe for concurrent use.
// Sessions are loaded from the log on first use and kept in memory.
type Engine struct {
	opts    Options
	log     *slog.Logger
	metrics Metrics
	est     history.Estimator

	cfg        atomic.Pointer[config.Config]
	cfgVersion atomic.Uint64
	bindings   atomic.Pointer[SessionBindingsFunc]

	mu       sync.Mutex
	sessions map[string]*session
	loading  map[string]*loadCall

	// changes feeds ChangeSeq and Changes.
	changes changes

	// inner is the log opts.Log wraps (stagingLog); staged holds each
	// session's pending staged append (stage.go) and creating each
	// session created in memory only, not stored yet (CreateParams.Staged),
	// both guarded by stageMu.
	inner checkpoint.Log
	// fixed keeps the token counts of long system prompts and tool sets
	// (fixedcount.go).
	fixed    fixedCounts
	stageMu  sync.Mutex
	staged   map[string]*Staged
	creating map[string]*unstored
}

type loadCall struct {
	done chan struct{}
	s    *session
	err  error
}

// New returns an Engine. It returns an error when a required option is
// missing.
func New(opts Options) (*Engine, error) {
	switch {
	case opts.Log == nil:
		return nil, errors.New("engine: Options.Log is required")
	case opts.Summarizer == nil:
		return nil, errors.New("engine: Options.Summarizer is required")
	case opts.Pool == nil:
		return nil, errors.New("engine: Options.Pool is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = noMetrics{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxLoadedSessions <= 0 {
		opts.MaxLoadedSessions = DefaultMaxLoadedSessions
	}
	inner := opts.Log
	e := &Engine{
		inner:    inner,
		opts:     opts,
		log:      opts.Logger,
		metrics:  opts.Metrics,
		sessions: map[string]*session{},
		loading:  map[string]*loadCall{},
	}
	e.opts.Log = stagingLog{Log: inner, e: e}
	cfg := opts.Config
	e.cfg.Store(&cfg)
	if q, ok := opts.Pool.(SharedQueue); ok {
		q.SetJobs(func(id, sig string) workers.Func { return e.job(id, trigger.Signal(sig)) })
	}
	return e, nil
}

// SessionBindingsFunc chooses the summarizer bindings of one session, from
// its id and labels: ok false leaves the configured bindings; an error
// means the session's own bindings cannot be built now (a proxied
// session's client credential is held only in memory, docs/design.md §10), and
// its compaction waits: an automatic one is skipped until the next check,
// a manual or overflow one fails with ErrUnavailable.
type SessionBindingsFunc func(id string, labels map[string]string) (bindings []config.Binding, ok bool, err error)

// SetSessionBindings installs fn (the provider proxy's); nil removes it.
func (e *Engine) SetSessionBindings(fn SessionBindingsFunc) {
	if fn == nil {
		e.bindings.Store(nil)
		return
	}
	e.bindings.Store(&fn)
}

// Config returns the daemon's current configuration.
func (e *Engine) Config() config.Config { return *e.cfg.Load() }

// SetConfig replaces the daemon's configuration (a SIGHUP reload). Each
// session takes it, with its own overlay, at its next request.
func (e *Engine) SetConfig(cfg config.Config) {
	e.cfg.Store(&cfg)
	e.cfgVersion.Add(1)
}

// session returns the loaded session id, loading it from the log on first
// use. Errors: ErrNotFound, ErrInvalid (a malformed id), the log's.
func (e *Engine) session(ctx context.Context, id string) (*session, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if s, ok := e.sessions[id]; ok {
		// Appends grow loaded sessions: the memory bound is checked at
		// every use, not only when a session is loaded.
		e.evictLocked(id)
		e.mu.Unlock()
		return s, nil
	}
	if c, ok := e.loading[id]; ok {
		e.mu.Unlock()
		<-c.done
		return c.s, c.err
	}
	c := &loadCall{done: make(chan struct{})}
	e.loading[id] = c
	e.mu.Unlock()

	// Other requests wait on this load: one client going away must not
	// cancel it for them.
	c.s, c.err = e.load(context.WithoutCancel(ctx), id)
	if c.err == nil {
		e.saveRow(c.s) // heals a row a crash left behind; nobody else has c.s yet
	}
	e.mu.Lock()
	delete(e.loading, id)
	if c.err == nil {
		e.sessions[id] = c.s
		e.evictLocked(id)
	}
	e.mu.Unlock()
	close(c.done)
	return c.s, c.err
}

// lock returns session id with its mutex held, loading it if needed. It
// never returns a copy that eviction dropped: a caller that loses the race
// with an eviction retries on the reloaded session.
func (e *Engine) lock(ctx context.Context, id string) (*session, error) {
	for {
		s, err := e.session(ctx, id)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		held, failed := e.unstoredState(id)
		if !s.evicted && (e.stageLost(s) || failed) {
			// A staged append was discarded or not written, or the
			// session created in memory could not be stored: the log
			// holds the truth.
			s.mu.Unlock()
			e.drop(id, s)
			e.forgetFailedCreation(id)
			continue
		}
		if !s.evicted && e.opts.Shared && !s.compacting && !held {
			// Another node may have appended (docs/design.md §9): catch up by
			// reloading from the log.
			last, err := e.opts.Log.LastSeq(ctx, id)
			if err != nil {
				s.mu.Unlock()
				if errors.Is(err, checkpoint.ErrNotFound) {
					e.forget(id)
				}
				return nil, mapLogErr(id, err)
			}
			if last != e.durableSeq(s, last) {
				e.abandonStage(s)
				s.mu.Unlock()
				e.drop(id, s)
				continue
			}
		}
		if !s.evicted {
			s.lastUsed.Store(e.opts.Now().UnixNano())
			return s, nil
		}
		s.mu.Unlock()
	}
}

// drop evicts the loaded copy s of session id (stale: the log moved on
// under it), so the next lock reloads it.
func (e *Engine) drop(id string, s *session) {
	e.mu.Lock()
	if e.sessions[id] == s {
		delete(e.sessions, id)
	}
	e.mu.Unlock()
	s.mu.Lock()
	s.evicted = true
	s.mu.Unlock()
}

// evictLocked drops the least recently used idle sessions once more than
// MaxLoadedSessions are loaded, or once their memory (memBytes) is over
// storage.session_memory_bytes, down to 7/8 of the bound so the scan is
// amortized. A session is idle when nobody holds its lock, no compaction
// of it is queued or running and no append of it is staged (stage.go).
// keep, the session being used, is
// never dropped: one larger than the budget alone stays while in use.
// Called with e.mu held.
func (e *Engine) evictLocked(keep string) {
	maxN := e.opts.MaxLoadedSessions
	budget := int64(e.cfg.Load().Storage.SessionMemoryBytes)
	var total int64
	for _, s := range e.sessions {
		total += s.memBytes.Load()
	}
	overBytes := budget > 0 && total > budget
	if len(e.sessions) <= maxN && !overBytes {
		return
	}
	type cand struct {
		id   string
		used int64
	}
	cands := make([]cand, 0, len(e.sessions))
	for id, s := range e.sessions {
		cands = append(cands, cand{id, s.lastUsed.Load()})
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(a.used, b.used) })
	excess := 0
	if len(e.sessions) > maxN {
		excess = len(e.sessions) - maxN*7/8
	}
	var bytes int64
	if overBytes {
		bytes = total - budget*7/8
	}
	for _, c := range cands {
		if excess <= 0 && bytes <= 0 {
			break
		}
		if c.id == keep {
			continue
		}
		s := e.sessions[c.id]
		if !s.mu.TryLock() {
			continue
		}
		// A staged append, or a session created in memory only, lives
		// only in memory until it is written.
		if e.opts.Pool.Active(c.id) == nil && !e.stagePending(s) && !e.unstoredHeld(c.id) {
			s.evicted = true
			delete(e.sessions, c.id)
			excess--
			bytes -= s.memBytes.Load()
		}
		s.mu.Unlock()
	}
}

// LoadedBytes returns about the memory the sessions held in memory take
// (what storage.session_memory_bytes bounds), in bytes.
func (e *Engine) LoadedBytes() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n int64
	for _, s := range e.sessions {
		n += s.memBytes.Load()
	}
	return n
}

// Loaded returns the number of sessions held in memory.
func (e *Engine) Loaded() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.sessions)
}

// validID checks a session id (checkpoint.ValidSessionID) and names the
// field. Errors: a *FieldError wrapping ErrInvalid.
func validID(id string) error {
	if err := checkpoint.ValidSessionID(id); err != nil {
		return &FieldError{Field: "id", Err: fmt.Errorf("%w: %v", ErrInvalid, err)}
	}
	return nil
}

// forget drops a session from memory (after DeleteSession).
func (e *Engine) forget(id string) {
	e.mu.Lock()
	s := e.sessions[id]
	delete(e.sessions, id)
	e.mu.Unlock()
	if s != nil {
		// A request holding this copy must not go on with it: lock retries
		// and finds the session gone (or a re-created one).
		s.mu.Lock()
		s.evicted = true
		s.mu.Unlock()
	}
}

// mapLogErr turns the log's errors into the engine's.
func mapLogErr(session string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, checkpoint.ErrNotFound):
		return fmt.Errorf("session %q: %w", session, ErrNotFound)
	case errors.Is(err, checkpoint.ErrExists):
		return fmt.Errorf("session %q: %w", session, ErrExists)
	case errors.Is(err, checkpoint.ErrInvalid):
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	default:
		return err
	}
}

// digest returns a short hex digest of b, for detecting a change of system
// prompt or tool set (docs/design.md §4).
func digest(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

func toolsJSON(tools []history.ToolDef) json.RawMessage {
	if len(tools) == 0 {
		return nil
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil
	}
	return b
}
