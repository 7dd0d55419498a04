package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/contextedit"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/offload"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/workers"
)

// entry is one message of the active history with its estimate: the o200k
// tokens of the message as it is sent (after context editing), uncalibrated.
type entry struct {
	msg    history.Message
	tokens uint64
	// chars is a tool result's size as context editing measures it
	// (contextedit.ResultChars), counted once at append; 0 otherwise.
	chars uint64
	// turn is, for a tool result, the ordinal (from 1) of the assistant
	// message that made its call: a turn of context editing (docs/design.md §2);
	// tool is its tool name, the call's when the message names none.
	turn uint64
	tool string
	// inputs are, for an assistant message, its tool calls with the
	// lengths of their input's string values (contextedit.InputStrings),
	// measured once at append for clear_tool_inputs; its turn is its own
	// ordinal.
	inputs []callStrings
}

// callStrings is one tool call of an assistant message: its id, tool name
// and the lengths in characters of its input's string values.
type callStrings struct {
	id, name string
	chars    []int
}

// openCall is what a tool result needs of the call it answers.
type openCall struct {
	turn uint64
	name string
}

// sessionExtra is the engine state kept in checkpoint.Meta.Extra.
type sessionExtra struct {
	// Pinned is the pinned context's blocks.
	Pinned []history.Block `json:"pinned,omitempty"`
	// WireLimit is the context window the session's first request implied
	// (Anthropic's context-1m-* beta), in tokens; 0 for none.
	WireLimit uint64 `json:"wire_context_limit,omitempty"`
	// Provider is the wire API family of a proxied session ("anthropic",
	// "openai"), which gives a model the catalog lacks its defaults.
	Provider string `json:"provider,omitempty"`
	// Settings are the session's effective model settings and window as
	// they were when it was created (docs/decisions.md "Model entries and
	// context windows"): a restart with another configuration serves the
	// session with them; nil in sessions of an older ctxd.
	Settings *storedSettings `json:"settings,omitempty"`
	// Learned is what the provider said of the window and of its count
	// (an overflow error), kept across restarts; nil before the first.
	Learned *learnedWindow `json:"learned,omitempty"`
}

// storedSettings is a session's own model entry and window.
type storedSettings struct {
	Model   config.Model             `json:"model"`
	Sources config.ModelFieldSources `json:"sources"`
	// Window is the context window, in tokens (0 while unknown), and
	// WindowSource where it came from (Window* constants).
	Window       uint64 `json:"window"`
	WindowSource string `json:"window_source"`
}

// learnedWindow is what a provider's context-length refusal taught.
type learnedWindow struct {
	// Limit is the window the provider named, in tokens; 0 when its
	// error named none.
	Limit uint64 `json:"limit,omitempty"`
	// From is the provider's words it was read from.
	From string `json:"from,omitempty"`
	// Accepted: Limit is the largest request the provider had accepted
	// (its refusal named no window), a lower bound of the window: a larger
	// request it accepts since raises it (resolveWindow).
	Accepted bool `json:"accepted,omitempty"`
	// Count is the provider's count of the refused request and Raw ctxd's
	// uncalibrated estimate of it, in tokens; 0 when the error gave no
	// count. Seq is the session's last message seq when it was taken.
	Count uint64 `json:"count,omitempty"`
	Raw   uint64 `json:"raw,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
}

// Window sources (Info.WindowSource; docs/config.md "Context windows").
const (
	// WindowSession: the session's own context_limit (POST or PATCH
	// context_limit, the proxy's X-Ctxd-Context-Limit header).
	WindowSession = "session"
	// WindowConfig: an operator's [models."<id>"] context_limit.
	WindowConfig = "config"
	// WindowCatalog: the built-in model catalog.
	WindowCatalog = "catalog"
	// WindowWire: the request said it (anthropic-beta context-1m-*).
	WindowWire = "wire"
	// WindowLearned: the provider's overflow error named a smaller one.
	WindowLearned = "learned"
	// WindowUnknown: none yet. The session is managed; automatic
	// compaction waits until the provider's first overflow names it.
	WindowUnknown = "unknown"
)

// ContextLimit1M is the window Anthropic's context-1m-* beta gives, in
// tokens.
const ContextLimit1M = anthropic.LongContextWindow

// session is one loaded session: its state (sessionState, the part the
// log determines, changed only by its own methods' rules) and what ties
// it to storage, the lock and the jobs. mu guards everything below it,
// the state included.
type session struct {
	id string
	// lastUsed is when the session was last locked, in Unix nanoseconds,
	// for eviction (read without mu).
	lastUsed atomic.Int64
	// memBytes is about the memory the session's active history holds
	// (history.SizeHint of each message), what storage.session_memory_bytes
	// bounds over every loaded session (evictLocked; read without mu).
	// The state's appendMessage and applyCheckpoint say how it changes;
	// addActive and useCheckpoint publish it here.
	memBytes atomic.Int64

	mu sync.Mutex
	sessionState
	// rowSum is the xxh3 of the listing row saveRow wrote last (0:
	// none yet in this copy): an unchanged row is not a change.
	rowSum uint64
	// evicted: this copy was dropped from memory; callers use e.lock to
	// get the live one.
	evicted    bool
	meta       checkpoint.Meta
	cfgVersion uint64
	lastSeq    uint64 // last event seq
	// retainNothing: the next overflow compaction retains no message
	// (CompactDeeper).
	retainNothing bool
	// lastFutile and nothingAtCheck: the last check found compaction
	// futile, or nothing to compact (the context's diagnostic code).
	lastFutile, nothingAtCheck bool

	// deferredPasses counts the passes planned since load that were
	// deferred because they would not pay for their rewrite, and
	// lastDeferred is the newest one's weighing (planPass).
	deferredPasses uint64
	lastDeferred   contextedit.Weighing
	// rules is the §4a check of the last assembled context, extended when
	// the next one only appends to it (checkRules).
	rules ruleCache

	// serverRefused says why the upstream refused the provider's
	// compaction (shape server falls back), "" when it did not.
	serverRefused string

	// offloader writes layer 1's offload files (docs/design.md §6).
	offloader *offload.Offloader

	// agentFile is the session's authored compaction.md (nil: none), loaded
	// when the configuration is (at load and after a reload), or the error
	// that loading it gave.
	agentFile *config.AgentFile
	agentErr  error
	// missingBinding is the summarizer binding the session's overlay
	// names (compaction.binding) when the daemon's configuration no longer
	// defines it: compaction then uses the extractive fallback only, or
	// fails naming it with fallback "none" (docs/design.md §5.5).
	missingBinding string

	// pending is a patch of the system prompt or tool set waiting for the
	// end of an open tool loop (docs/design.md §4a); nil when none.
	pending *checkpoint.Meta
	// clientState is the Data of the newest client_state event (the
	// provider proxy's record, docs/design.md §10), nil when none.
	clientState json.RawMessage
	// idem is the appends made with an idempotency key, by key (the
	// newest maxIdemKeys; idemOrder oldest first): a retry with one is
	// answered from the log instead of stored again.
	idem      map[string]idemRec
	idemOrder []string
	// stage is the append applied in memory and not yet written
	// (Engine.Stage), nil when none or once it is written.
	stage *Staged

	lastCheck  Check
	lastError  string
	compacting bool // a compaction of this session is past its snapshot
	// summarizing: that compaction calls the summarizer (it installs no
	// prepared summary).
	summarizing bool

	// prepared is the newest speculative summary (docs/design.md §5.1),
	// nil when none (prepare.go); prepareTicket is the job making one
	// that this node submitted, nil when none.
	prepared      *preparedSummary
	prepareTicket *workers.Ticket
	// afterPrepare is a manual, overflow or post-check compaction that
	// joined the running speculative summary job, which runs it when the
	// summary is stored ("" for none; submitCheck).
	afterPrepare trigger.Signal
	// idleDone is the cacheAt an idle compaction was last tried for
	// (idle.go).
	idleDone time.Time
	// idlePlan is the estimate the queued idle compaction was queued
	// with, nil when none.
	idlePlan *idlePlan
}

// Check is the last trigger check of a session, for `ctxctl doctor`.
type Check struct {
	Time      time.Time      `json:"time"`
	Signal    trigger.Signal `json:"signal"`
	Tokens    uint64         `json:"tokens"`
	Source    string         `json:"tokens_source"`
	Threshold uint64         `json:"threshold"`
	Fired     bool           `json:"fired"`
	Reason    string         `json:"reason"`
}

// updated is when the session last changed: its meta, a message, a patch
// or a checkpoint.
func (s *session) updated() time.Time {
	if s.changed.After(s.meta.Updated) {
		return s.changed
	}
	return s.meta.Updated
}

// load rebuilds a session from its log: meta, validation state, the latest
// checkpoint and the active history after it, the ledger of recorded
// rewrites, and the newest usage. A restart begins a new run: the failure
// circuit starts closed (docs/design.md §5.5).
func (e *Engine) load(ctx context.Context, id string) (*session, error) {
	meta, err := e.opts.Log.GetMeta(ctx, id)
	if err != nil {
		return nil, mapLogErr(id, err)
	}
	s := &session{id: id, meta: meta, sessionState: newSessionState()}
	if err := e.configure(s); err != nil {
		return nil, err
	}
	var started, ended uint64 // the newest compaction_started and its end
	err = e.opts.Log.Range(ctx, id, 1, func(ev checkpoint.Event) error {
		s.lastSeq = ev.Seq
		if ev.Idempotency != nil {
			s.rememberKey(*ev.Idempotency, ev.Seq)
		}
		switch ev.Kind {
		case checkpoint.KindCompactionStarted:
			started = ev.Seq
		case checkpoint.KindCompactionFailed:
			ended = ev.Seq
		case checkpoint.KindDiagnostic:
			var d struct {
				Code string `json:"code"`
			}
			if json.Unmarshal(ev.Data, &d) == nil && d.Code == api.DiagNothingToCompact {
				ended = ev.Seq
			}
		case checkpoint.KindMessage:
			if ev.Message == nil {
				return fmt.Errorf("event %d: %w", ev.Seq, checkpoint.ErrCorrupt)
			}
			s.touch(ev.Time)
			m := *ev.Message
			m.Seq = ev.Seq
			s.state.Apply(m)
			s.addActive(m)
		case checkpoint.KindCheckpoint:
			ended = ev.Seq
			cp, err := e.opts.Log.GetCheckpoint(ctx, id, ev.Seq)
			if err != nil {
				return err
			}
			s.useCheckpoint(cp)
		case checkpoint.KindSessionUpdated:
			s.touch(ev.Time)
			var d deferredUpdate
			if json.Unmarshal(ev.Data, &d) == nil && d.DeferredMeta != nil {
				m := *d.DeferredMeta
				s.pending = &m
			} else {
				s.pending = nil // applied
			}
		case checkpoint.KindPrefixReset:
			var d prefixReset
			if json.Unmarshal(ev.Data, &d) == nil && d.WithheldBefore > s.ledger.WithheldThinkingBefore() {
				s.ledger.Withhold(d.WithheldBefore)
				s.retokenize()
			}
		case checkpoint.KindClientState:
			s.clientState = ev.Data
		case checkpoint.KindPrepared:
			var p preparedSummary
			if json.Unmarshal(ev.Data, &p) == nil {
				p.Seq = ev.Seq
				s.prepared = &p
			}
		case checkpoint.KindLedger:
			var en ledger.Entry
			if json.Unmarshal(ev.Data, &en) == nil {
				s.applyLedger(en)
			}
		case checkpoint.KindOffload:
			var r offload.Record
			if json.Unmarshal(ev.Data, &r) == nil && r.ToolCallID != "" {
				s.offloads[r.ToolCallID] = r.Path
			}
		case checkpoint.KindContextEdit:
			var p contextedit.Pass
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				return fmt.Errorf("event %d: context_edit: %w", ev.Seq, checkpoint.ErrCorrupt)
			}
			s.applyPass(p)
		}
		return nil
	})
	if err != nil {
		return nil, mapLogErr(id, err)
	}
	// A restart begins a new run (docs/design.md §5.5).
	s.failures = 0
	s.circuitOpen = false
	if _, fleet := e.opts.Pool.(SharedQueue); started > ended && !fleet {
		// The daemon stopped during a compaction: it wrote nothing, so say
		// so in the log, or an event stream would show it running forever.
		// Not with a shared queue (docs/design.md §9): another node may be
		// running it now, and a dead node's job is redelivered, which ends it.
		d, _ := json.Marshal(map[string]any{"reason": "restart", "message": "interrupted: the daemon stopped during this compaction; nothing was committed", "started_seq": started})
		if seq, err := e.opts.Log.Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindCompactionFailed, Data: d}}); err == nil {
			s.lastSeq = seq
		}
	}
	if l := s.learned; l != nil && l.Count > 0 && l.Seq >= s.anchorSeq {
		// The overflow's count is newer than any usage replayed.
		s.anchor, s.anchorRaw, s.anchorSeq = l.Count, l.Raw, l.Seq
		s.usage = nil
		s.sinceUsage, s.editedSinceUsage = 0, 0
	}
	if l := s.learned; l != nil && l.Accepted && s.maxAccepted > s.limit {
		// The requests replayed raise a window learned from the largest
		// accepted (resolveWindow).
		if err := e.configure(s); err != nil {
			return nil, err
		}
	}
	e.restoreLastCheck(s)
	return s, nil
}

// restoreLastCheck rebuilds the last trigger check after a load (a restart,
// an eviction): the check itself is not stored, and `ctxctl doctor` must
// still say why compaction did or did not fire. It is the
// post-check decision the state rebuilt from the log gives; nothing is
// queued here, so Fired is false and the reason says what the next check
// will do.
func (e *Engine) restoreLastCheck(s *session) {
	if s.lastMsg == 0 {
		return
	}
	// decide, not check: a load writes nothing (check may record a
	// futility diagnostic).
	tokens, source := s.estimate()
	d, _ := e.decide(s, trigger.PostCheck, tokens)
	s.lastCheck = Check{Time: e.opts.Now().UTC(), Signal: trigger.PostCheck, Tokens: tokens, Source: source,
		Threshold: s.shownThreshold(), Reason: "rebuilt from the log when the session was loaded: " + d.Reason}
	if d.Compact {
		s.lastCheck.Reason += " (the next check compacts)"
	}
}

// configure derives the session's effective configuration, model and
// threshold from the daemon's configuration and the session's meta.
func (e *Engine) configure(s *session) error {
	base := e.Config()
	cfg := base
	missing := ""
	if s.meta.Overlay != "" {
		var c config.Config
		var err error
		if s.meta.Created.IsZero() {
			// A session being created: its overlay must name a binding
			// the daemon has.
			c, _, err = config.ApplyOverlay(base, []byte(s.meta.Overlay), config.OverlayName)
		} else {
			// A stored session's overlay may name a binding a reload
			// removed since: the session stays readable, and compaction
			// says so (missingBinding).
			c, missing, _, err = config.ApplyStoredOverlay(base, []byte(s.meta.Overlay), config.OverlayName)
		}
		if err != nil {
			// The field is the first key the overlay got wrong (a key it
			// may not set, docs/design.md §3), else the config field itself.
			field := "config"
			if ce, ok := errors.AsType[*config.Error](err); ok && len(ce.Problems) > 0 && ce.Problems[0].Key != "" {
				field = ce.Problems[0].Key
			}
			return &FieldError{Field: field, Err: fmt.Errorf("%w: config: %v", ErrInvalid, err)}
		}
		cfg = c
	}
	var extra sessionExtra
	if len(s.meta.Extra) > 0 {
		_ = json.Unmarshal(s.meta.Extra, &extra)
	}
	w, err := resolveWindow(cfg, s.meta, extra, s.maxAccepted)
	if err != nil {
		return err
	}
	model, limit := w.model, w.limit
	var tools []history.ToolDef
	if len(s.meta.Tools) > 0 {
		if err := json.Unmarshal(s.meta.Tools, &tools); err != nil {
			return fmt.Errorf("session %q: stored tools: %w", s.id, err)
		}
	}
	if s.cal == nil || s.calModel != s.meta.Model {
		f := model.TokenFactor
		if f <= 0 {
			f = 1
		}
		c, err := history.NewCalibrator(f)
		if err != nil {
			return invalidField("model", "token_factor %v of model %q: %v", f, s.meta.Model, err)
		}
		s.cal, s.calModel = c, s.meta.Model
	}
	s.cfg = cfg
	s.missingBinding = missing
	s.cfgVersion = e.cfgVersion.Load()
	s.model = model
	s.limit = limit
	s.win = w
	s.learned = extra.Learned
	// config.Load and ApplyOverlay fold the legacy buffer_tokens alias into
	// Trigger (docs/design.md §3).
	s.threshold = trigger.Threshold(limit, cfg.ContextCompaction.Trigger)
	s.shape = trigger.ResolveShape(cfg.Compaction.Shape, model.ThinkingBinding)
	s.system = s.meta.SystemPrompt
	s.tools = tools
	s.pinned = extra.Pinned
	s.fixedTokens = e.fixedTokens(s)
	s.editMode, s.editWhy = contextedit.Mode(cfg.ContextEditing, model.ServerContextEditing)
	s.agentFile, s.agentErr = nil, nil
	if path := cfg.Compaction.AgentFile; path != "" {
		if af, err := config.LoadAgentFile(path); err != nil {
			s.agentErr = fmt.Errorf("%w: compaction.agent_file: %v", ErrInvalid, err)
		} else {
			s.agentFile = &af
		}
	}
	dir := cfg.Offload.Dir
	if dir == "" {
		dir = e.opts.OffloadDir
	}
	if dir == "" && cfg.Storage.DataDir != "" {
		dir = filepath.Join(cfg.Storage.DataDir, "offload")
	}
	var retainer offload.Retainer
	if e.opts.Artifacts != nil {
		retainer = e.opts.Artifacts
	}
	s.offloader = offload.New(cfg.Offload, dir, retainer, e.log)
	// A result of an excluded tool (a file read) that alone exceeds a
	// quarter of the window — what retention keeps at most (docs/design.md §5.2)
	// — can never stay in the context: offload it all the same.
	s.offloader.ExcludedMaxChars = limit / 4 * contextedit.CharsPerToken
	if r := cfg.Storage.MinFreeBytes; r > 0 && dir != "" {
		s.offloader.Space = store.NewSpace(dir, r, nil)
	}
	return nil
}

// MinContextLimit and MaxContextLimit bound a session's context window, in
// tokens: config's bounds, which a model's context_limit keeps to too.
const (
	MinContextLimit = config.MinContextLimit
	MaxContextLimit = config.MaxContextLimit
)

func (e *Engine) fixedTokens(s *session) uint64 {
	// The tools' count is kept by their stored form, which they are
	// decoded from (configure).
	n := e.fixed.count('s', s.system, func() uint64 { return e.est.Text(s.system) }) +
		e.fixed.count('t', string(s.meta.Tools), func() uint64 { return e.est.Tools(s.tools) })
	if len(s.pinned) > 0 {
		n += e.est.Message(pinnedMessage(s.pinned))
	}
	return n
}

// refresh re-derives the session's configuration after a reload (SIGHUP).
// Called with s.mu held.
func (e *Engine) refresh(s *session) {
	if s.cfgVersion == e.cfgVersion.Load() {
		return
	}
	if err := e.configure(s); err != nil {
		// The overlay no longer fits the new base: keep the old settings.
		e.log.Warn("session keeps its configuration after a reload", "session", s.id, "err", err)
		s.cfgVersion = e.cfgVersion.Load()
	}
}

// Figure sources of a token estimate.
const (
	SourceReported  = "reported"
	SourceEstimated = "estimated"
)

// check decides signal sig for the session now and records it as the last
// check. An automatic signal over the threshold does not compact when
// nothing could be compacted or when compaction is futile (docs/design.md §5.2);
// the first futile check of a run records one diagnostic event. Called with
// s.mu held.
func (e *Engine) check(ctx context.Context, s *session, sig trigger.Signal) trigger.Decision {
	tokens, source := s.estimate()
	d, futile := e.decide(s, sig, tokens)
	s.lastFutile = futile
	s.lastCheck = Check{Time: e.opts.Now().UTC(), Signal: sig, Tokens: tokens, Source: source,
		Threshold: s.shownThreshold(), Fired: d.Compact, Reason: d.Reason}
	if futile && !s.futilityRun {
		s.futilityRun = true
		fixed, _ := e.fixedFigure(s, tokens)
		data, _ := json.Marshal(map[string]any{"level": api.DiagLevelWarn, "code": api.DiagFutile, "message": d.Reason,
			"fixed_prefix_tokens": fixed, "threshold": s.threshold})
		if seq, err := e.appendLog(context.WithoutCancel(ctx), s, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic, Data: data}}); err == nil {
			s.lastSeq = max(s.lastSeq, seq)
		}
		e.log.Warn("automatic compaction is futile", "session", s.id, "reason", d.Reason)
	}
	return d
}

// decide is trigger.Decide with the engine's two further rules for the
// automatic signals (docs/design.md §5.2): no compaction that would replace
// nothing, and none that cannot get under the threshold — when the fixed
// prefix (system prompt, tools, pinned context, the carried first request
// and the current request) alone reaches it (futile). Called with s.mu held.
func (e *Engine) decide(s *session, sig trigger.Signal, tokens uint64) (trigger.Decision, bool) {
	s.nothingAtCheck = false
	d := trigger.Decide(sig, s.triggerState(tokens))
	if !d.Compact && s.win.source == WindowUnknown {
		// The threshold of an unknown window is a placeholder (Info
		// shows 0): say what the session waits for instead.
		d.Reason = fmt.Sprintf("%s: the window is unknown (configure the model's context_limit, or ctxd learns it from the provider's usage or first context-length error); %d tokens so far", sig, tokens)
	}
	if !d.Compact || !sig.Automatic() {
		return d, false
	}
	if why, ok := e.serverSkips(s, sig, tokens); ok {
		return trigger.Decision{Reason: why}, false
	}
	if p, capped := e.fixedFigure(s, tokens); p >= s.threshold {
		why := fmt.Sprintf("%s: compaction is futile: fixed prefix %d tokens ≥ threshold %d (system prompt, tools, pinned context and the current request, which compaction keeps)", sig, p, s.threshold)
		if capped {
			_, source := s.estimate()
			why += fmt.Sprintf("; ctxd's own estimate of the prefix, %d tokens, is more than the provider counted for the whole context (%s), so the provider's figure stands", e.fixedPrefix(s), e.sizeText(s, tokens, source))
		}
		return trigger.Decision{Reason: why}, true
	}
	if why := e.nothingToCompact(s, sig); why != "" {
		s.nothingAtCheck = true
		return trigger.Decision{Reason: fmt.Sprintf("%s: %d tokens is at or above the threshold of %d, but nothing to compact: %s", sig, tokens, s.threshold, why)}, false
	}
	if w, ok := e.weighCompaction(s, tokens); ok && !w.PaysBack() {
		return trigger.Decision{Reason: fmt.Sprintf("%s: %d tokens is at or above the threshold of %d, but %s", sig, tokens, s.threshold, w)}, false
	}
	return d, false
}

// fixedPrefix is what no compaction can remove, calibrated: system prompt,
// tools, pinned context and the requests a compaction carries (docs/design.md
// §5.2). Called with s.mu held.
func (e *Engine) fixedPrefix(s *session) uint64 {
	return s.calibrate(s.fixedTokens + e.carriedEstimate(s))
}

// fixedFigure is the fixed prefix (fixedPrefix) as the futility rule and
// its diagnostics give it, for a context of tokens (estimate): never more
// than the context it is part of. When the context's size rests on the
// provider's reported usage and ctxd's calibrated estimate of the prefix
// is larger (the provider counts fewer tokens than ctxd's estimator, by
// more than calibration has learned), the provider's figure stands and
// capped is set. Called with s.mu held.
func (e *Engine) fixedFigure(s *session, tokens uint64) (fixed uint64, capped bool) {
	p := e.fixedPrefix(s)
	if s.usage != nil && p > tokens {
		return tokens, true
	}
	return p, false
}

// sizeText says what a context size of tokens (estimate, with its source)
// rests on: the provider's reported usage ("N tokens, reported by the
// provider"), that usage plus ctxd's estimate of what followed, or ctxd's
// estimate alone. Called with s.mu held.
func (e *Engine) sizeText(s *session, tokens uint64, source string) string {
	switch {
	case source == SourceReported:
		return fmt.Sprintf("%d tokens, reported by the provider", tokens)
	case s.usage != nil:
		return fmt.Sprintf("%d tokens: %d reported by the provider for its last answer, adjusted by ctxd's estimate of what changed since", tokens, s.usage.ContextTokens()+s.usageOutput)
	}
	return fmt.Sprintf("%d tokens, ctxd's estimate", tokens)
}

func (s *session) triggerState(tokens uint64) trigger.State {
	return trigger.State{
		Auto:                    s.cfg.ContextCompaction.Auto,
		Threshold:               s.threshold,
		Tokens:                  tokens,
		OpenRound:               s.openRound(),
		NewGroupSinceCheckpoint: s.newGroupSinceCheckpoint(),
		CircuitOpen:             s.circuitOpen,
	}
}

// SummaryPreamble begins the text of the summary message that stands for the
// messages a checkpoint replaced (docs/design.md §4).
const SummaryPreamble = "This is a summary of the %d earlier messages of this conversation, written when its context was compacted. The conversation continues after it."

func summaryMessage(cp checkpoint.Checkpoint) history.Message {
	if cp.Binding == BindingServer {
		return serverSummaryMessage(cp)
	}
	text := fmt.Sprintf(SummaryPreamble, cp.SummarizedMessages) + "\n\n" + cp.Summary
	return history.Message{
		Role:    history.RoleUser,
		Content: []history.Block{{Type: history.BlockText, Text: text}},
		Time:    cp.Time,
	}
}

// pinnedMessage is the user message that carries a session's pinned context
// (docs/design.md §4): its blocks as given.
func pinnedMessage(pinned []history.Block) history.Message {
	return history.Message{Role: history.RoleUser, Content: pinned}
}

// prefixReset is the Data of a prefix_reset event.
type prefixReset struct {
	Cause          string `json:"cause"`
	WithheldBefore uint64 `json:"withheld_before"`
}

func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
