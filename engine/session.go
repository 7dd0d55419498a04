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
const ContextLimit1M = 1_000_000

// session is one loaded session. mu guards everything below it.
type session struct {
	id string
	// lastUsed is when the session was last locked, in Unix nanoseconds,
	// for eviction (read without mu).
	lastUsed atomic.Int64
	// memBytes is about the memory the session's active history holds
	// (history.SizeHint of each message), what storage.session_memory_bytes
	// bounds over every loaded session (evictLocked; read without mu).
	memBytes atomic.Int64

	mu sync.Mutex
	// rowSum is the xxh3 of the listing row saveRow wrote last (0:
	// none yet in this copy): an unchanged row is not a change.
	rowSum uint64
	// evicted: this copy was dropped from memory; callers use e.lock to
	// get the live one.
	evicted    bool
	meta       checkpoint.Meta
	cfg        config.Config
	cfgVersion uint64
	model      config.Model
	limit      uint64
	// win is how model and limit were resolved: where the window came
	// from, what the stored settings differ in from the current
	// configuration; learned is what the provider said.
	win     window
	learned *learnedWindow
	// anchor is the provider's newest count of a whole request (a
	// reported usage: input + cache read + cache write; an overflow
	// error's count) and anchorRaw ctxd's uncalibrated estimate of that
	// same request, taken at message seq anchorSeq; anchor 0 before the
	// first. A context no usage covers (after a checkpoint) is estimated
	// from it: the count less ctxd's calibrated estimate of what left
	// since (docs/design.md §2), so figures before and after a compaction
	// are in one unit.
	anchor, anchorRaw, anchorSeq uint64
	// maxAccepted is the largest request the provider accepted, by its
	// reported usage (input + cache read + cache write), in tokens: a
	// window no smaller than it.
	maxAccepted uint64
	// retainNothing: the next overflow compaction retains no message
	// (CompactDeeper).
	retainNothing bool
	// lastFutile and nothingAtCheck: the last check found compaction
	// futile, or nothing to compact (the context's diagnostic code).
	lastFutile, nothingAtCheck bool
	threshold                  uint64
	shape                      string

	system string
	tools  []history.ToolDef
	pinned []history.Block
	// fixedTokens is the estimate of system prompt, tools and pinned
	// context, uncalibrated.
	fixedTokens uint64

	state   *history.State // validation state of the whole log
	lastSeq uint64         // last event seq
	lastMsg uint64         // seq of the newest message
	// changed is when a message, a patch or a checkpoint last changed the
	// session (Info.Updated; meta.Updated moves only with the meta).
	changed time.Time

	cp            *checkpoint.Checkpoint // latest, nil before the first
	summaryMsg    *history.Message
	summaryTokens uint64

	// The requests that survive compaction (docs/design.md §5.2): first is the
	// session's first user message and req the newest one (the prompt that
	// opened the current run), as appended; firstPinned and keptReq are
	// what the latest checkpoint carries of them outside the summary (nil:
	// nothing), with their sent-form estimates, uncalibrated.
	first, req           *entry
	firstPinned, keptReq *entry
	// futilityRun: the futility diagnostic was given in this run
	// (docs/design.md §5.2: one per run).
	futilityRun bool

	active       []entry
	activeTokens uint64
	// rewrites are the figures of each recorded rewrite (pass or
	// compaction) since load, rebuilt from the log (RewriteFigures).
	rewrites []rewriteFigure
	// deferredPasses counts the passes planned since load that were
	// deferred because they would not pay for their rewrite, and
	// lastDeferred is the newest one's weighing (planPass).
	deferredPasses uint64
	lastDeferred   contextedit.Weighing
	// rules is the §4a check of the last assembled context, extended when
	// the next one only appends to it (checkRules).
	rules ruleCache
	// compactedAt is the seq of the newest active message holding a
	// provider compaction block (history.BlockCompaction), 0 when none: the
	// provider drops everything before that block, so the messages before
	// it count no tokens.
	compactedAt uint64

	// usage is the newest reported usage after the latest checkpoint; usageAt
	// is the index in active just after the message that carried it (so
	// active[usageAt:] was appended since); sinceUsage sums their tokens;
	// editedSinceUsage is what passes removed from before usageAt.
	usage            *history.Usage
	usageOutput      uint64 // the response's output as counted: see outputTokens
	usageAt          int
	sinceUsage       uint64
	editedSinceUsage uint64

	// mode is the session's own proxy mode ("" follows [proxy] mode) and
	// totals its savings ledger's totals (docs/design.md §10).
	mode   string
	totals ledger.Totals

	// Failure circuit of the current run (docs/design.md §5.5).
	failures    int
	circuitOpen bool

	// serverRefused says why the upstream refused the provider's
	// compaction (shape server falls back), "" when it did not.
	serverRefused string

	// Layers 1 and 2 (docs/design.md §6): the offloader, the offload file of each
	// offloaded result by tool_call_id, the context-edit ledger and the
	// mode in effect ("local", "server" or "off") with its reason.
	offloader *offload.Offloader
	offloads  map[string]string
	// assistants counts the assistant messages appended; calls maps an open
	// call's id to the ordinal of the assistant message that made it and
	// the tool's name.
	assistants uint64
	calls      map[string]openCall
	ledger     contextedit.Ledger
	editMode   string
	editWhy    string

	// cal is the session's token calibrator for its model (docs/design.md §2
	// "Tokens"), rebuilt from the session's own log on load, so the
	// estimate — and every response carrying it — is a pure function of the
	// log, the same before and after a restart or an eviction.
	cal      *history.Calibrator
	calModel string

	// Bookkeeping for Info.
	messages    uint64 // message events in the log
	checkpoints uint64

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
	// afterPrepare is a manual or overflow compaction that joined the
	// running speculative summary job, which runs it when the summary is
	// stored ("" for none).
	afterPrepare trigger.Signal
	// cacheAt is when the session's provider request was last sent (its
	// prompt cache refreshed), cacheTTL the lifetime that request asked
	// for, and idleDone the cacheAt an idle compaction was last tried for
	// (idle.go).
	cacheAt, idleDone time.Time
	cacheTTL          time.Duration
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

// touch records a change of the session at t (UTC) for Info.Updated.
func (s *session) touch(t time.Time) {
	if t.After(s.changed) {
		s.changed = t
	}
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
	s := &session{id: id, meta: meta, state: &history.State{}, offloads: map[string]string{}}
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
			e.addActive(s, m)
		case checkpoint.KindCheckpoint:
			ended = ev.Seq
			cp, err := e.opts.Log.GetCheckpoint(ctx, id, ev.Seq)
			if err != nil {
				return err
			}
			e.applyCheckpoint(s, cp)
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
				e.retokenize(s)
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
				e.applyLedger(s, en)
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
			e.applyPass(s, p)
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
	tokens, source := e.estimate(s)
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
	w, err := resolveWindow(cfg, s.meta, extra)
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
// tokens: below the minimum no conversation fits beside a summary; above
// the maximum the figure is a typo (no model has a window of 10^8 tokens).
const (
	MinContextLimit = 1000
	MaxContextLimit = 100_000_000
)

func (e *Engine) fixedTokens(s *session) uint64 {
	n := e.est.Text(s.system) + e.est.Tools(s.tools)
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

// addActive appends a stored message to the active history and the usage
// bookkeeping. Called with s.mu held (or during load).
func (e *Engine) addActive(s *session, m history.Message) {
	if m.Tokens == 0 {
		e.est.Fill(&m)
	}
	t := e.sentTokens(s, m)
	s.messages++
	var chars uint64
	var inputs []callStrings
	var call openCall
	switch m.Role {
	case history.RoleTool:
		chars = contextedit.ResultChars(m)
		call = s.calls[m.ToolCallID]
		delete(s.calls, m.ToolCallID)
		if m.ToolName != "" {
			call.name = m.ToolName
		}
	case history.RoleAssistant:
		s.assistants++
		call.turn = s.assistants
		for _, b := range m.Content {
			if b.Type == history.BlockToolCall {
				if s.calls == nil {
					s.calls = map[string]openCall{}
				}
				s.calls[b.ID] = openCall{turn: s.assistants, name: b.Name}
				if _, n := contextedit.InputStrings(b.Input); len(n) > 0 {
					inputs = append(inputs, callStrings{id: b.ID, name: b.Name, chars: n})
				}
			}
		}
	case history.RoleUser:
		clear(s.calls) // open calls are abandoned
	}
	en := entry{msg: m, tokens: t, chars: chars, turn: call.turn, tool: call.name, inputs: inputs}
	if history.IsPersonPrompt(m) {
		// The current and the first request are prompts a person wrote,
		// never a reminder or an agent's environment item (docs/design.md
		// §5.2).
		c := en
		s.req = &c
		if s.first == nil {
			s.first = &c
		}
	}
	s.active = append(s.active, en)
	s.activeTokens += t
	s.memBytes.Add(int64(history.SizeHint(m)))
	if history.LastCompaction(m) >= 0 {
		// A provider compaction: what precedes it is no longer billed.
		s.compactedAt = m.Seq
		e.retokenize(s)
	}
	s.lastMsg = m.Seq
	if m.Role == history.RoleAssistant && m.Usage != nil && m.Usage.TotalTokens() > 0 {
		e.observeUsage(s, m)
		// The request this answer's usage counts is the context before it.
		s.maxAccepted = max(s.maxAccepted, m.Usage.ContextTokens())
		if n, raw := m.Usage.ContextTokens(), s.fixedTokens+s.carriedTokens()+s.summaryTokens+s.activeTokens-t; plausibleCount(n, raw) {
			s.anchor, s.anchorRaw, s.anchorSeq = n, raw, m.Seq
		}
		u := *m.Usage
		s.usage = &u
		s.usageOutput = e.outputTokens(s, m)
		s.usageAt = len(s.active)
		s.sinceUsage = 0
		s.editedSinceUsage = 0
		return
	}
	s.sinceUsage += t
	if history.IsPersonPrompt(m) {
		// A user prompt begins a new run (docs/design.md §5.5).
		s.failures = 0
		s.circuitOpen = false
		s.futilityRun = false
	}
}

// sentTokens is the estimate of m as it is sent: the stored estimate, or
// that of its rendering when context editing or withheld thinking changed
// it; 0 before a provider compaction block, which the provider replaces by
// its summary.
func (e *Engine) sentTokens(s *session, m history.Message) uint64 {
	if m.Seq < s.compactedAt {
		return 0 // before a provider compaction block
	}
	if r, changed := e.renderChanged(s, m); changed {
		return e.est.Message(r)
	}
	return m.Tokens
}

// observeUsage feeds the model's calibrator with the growth between two
// consecutive reported usages: reported (this request's context − the
// previous request's context − the previous response's output) against the
// estimate of the messages appended between them (docs/design.md §2 "Tokens").
// Growth, not whole requests, so a system prompt the agent never gave ctxd
// does not bias the factor.
func (e *Engine) observeUsage(s *session, m history.Message) {
	if s.usage == nil || s.editedSinceUsage > 0 {
		return
	}
	prev := s.usage.ContextTokens() + s.usageOutput
	now := m.Usage.ContextTokens()
	if now <= prev || s.sinceUsage == 0 {
		return
	}
	s.cal.Observe(now-prev, s.sinceUsage)
}

// outputTokens is what the response m adds to the next request: its
// reported output_tokens when plausible, else its calibrated estimate.
// Some agents log a streaming snapshot of usage whose output_tokens is the
// first few tokens only (Claude Code 2.x: 74 of 139 responses of the corpus);
// no model tokenizer counts below half of o200k, so a reported output under
// half the estimate is taken as such a snapshot (docs/decisions.md
// "Estimator accuracy").
func (e *Engine) outputTokens(s *session, m history.Message) uint64 {
	reported := m.Usage.OutputTokens
	if reported*2 >= m.Tokens {
		return reported
	}
	return e.calibrate(s, m.Tokens)
}

// applyCheckpoint makes cp the session's latest checkpoint: the summary
// replaces everything before FirstRetainedSeq (or after SnapshotSeq when
// nothing is retained); reported usage before it is never used again
// (docs/design.md §2 "Tokens"). Called with s.mu held (or during load).
func (e *Engine) applyCheckpoint(s *session, cp checkpoint.Checkpoint) {
	// What the compaction costs and saves (docs/design.md §4): the next
	// request writes its whole context again; every later one sends the
	// difference no more. Both in the checkpoint's own unit.
	f := rewriteFigure{rewritten: cp.TokensAfter, at: s.assistants, compaction: true}
	if cp.TokensBefore > cp.TokensAfter {
		f.saved = cp.TokensBefore - cp.TokensAfter
	}
	s.rewrites = append(s.rewrites, f)
	c := cp
	s.cp = &c
	s.checkpoints++
	s.touch(cp.Time)
	sm := summaryMessage(cp)
	s.summaryMsg = &sm
	s.summaryTokens = e.est.Message(sm)
	keepFrom := cp.SnapshotSeq + 1
	if cp.FirstRetainedSeq > 0 {
		keepFrom = cp.FirstRetainedSeq
	}
	s.keptReq = e.carried(s, cp.Request)
	s.firstPinned = e.carried(s, cp.FirstRequest)
	kept := s.active[:0:0]
	var total uint64
	mem := int64(history.SizeHint(sm))
	for _, en := range s.active {
		if en.msg.Seq >= keepFrom {
			kept = append(kept, en)
			total += en.tokens
			mem += int64(history.SizeHint(en.msg))
		}
	}
	s.active = kept
	s.memBytes.Store(mem)
	s.activeTokens = total
	s.usage = nil
	s.usageAt = 0
	s.sinceUsage = total
	s.editedSinceUsage = 0
	if cp.Stalled {
		s.failures++
	} else {
		// A successful checkpoint of any reason closes the circuit
		// (docs/design.md §5.5).
		s.failures = 0
		s.circuitOpen = false
	}
}

// carried returns the entry a checkpoint carries outside its summary
// (docs/design.md §5.2): the stored message with c.Seq as it is sent, or its
// stub. nil for nil c or a message no longer known. Called with s.mu held
// (or during load), before the checkpoint drops what it covers.
func (e *Engine) carried(s *session, c *checkpoint.Carried) *entry {
	if c == nil {
		return nil
	}
	if c.Stub != "" {
		m := history.Message{Seq: c.Seq, Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: c.Stub}}}
		return &entry{msg: m, tokens: e.est.Message(m)}
	}
	for _, en := range s.active {
		if en.msg.Seq == c.Seq {
			en := en
			return &en
		}
	}
	for _, en := range []*entry{s.keptReq, s.firstPinned, s.req, s.first} {
		if en != nil && en.msg.Seq == c.Seq {
			c := *en
			return &c
		}
	}
	return nil
}

// factor is the session model's calibration factor.
func (e *Engine) factor(s *session) float64 {
	return s.cal.Factor()
}

func (e *Engine) calibrate(s *session, raw uint64) uint64 {
	return s.cal.Apply(raw)
}

// Figure sources of a token estimate.
const (
	SourceReported  = "reported"
	SourceEstimated = "estimated"
)

// estimate is the session's assembled-context size in tokens and its
// source: the newest reported usage (input + cache + output) plus the
// calibrated estimate of what was appended since, less what context editing
// removed; or, with no usage since the latest checkpoint, the calibrated
// estimate of the whole assembled context (docs/design.md §2, §5.1). Called with
// s.mu held.
func (e *Engine) estimate(s *session) (uint64, string) {
	if s.usage != nil {
		n := s.usage.ContextTokens() + s.usageOutput
		removed := e.calibrate(s, s.editedSinceUsage)
		if removed >= n {
			n = 0
		} else {
			n -= removed
		}
		if s.sinceUsage == 0 && s.editedSinceUsage == 0 && s.usageOutput == s.usage.OutputTokens {
			return n, SourceReported
		}
		return n + e.calibrate(s, s.sinceUsage), SourceEstimated
	}
	return e.scaled(s, e.rawTokens(s)), SourceEstimated
}

// rawTokens is ctxd's uncalibrated estimate of the whole assembled
// context. Called with s.mu held.
func (e *Engine) rawTokens(s *session) uint64 {
	return s.fixedTokens + s.carriedTokens() + s.summaryTokens + s.activeTokens
}

// plausibleCount reports whether a provider's count of a whole request
// can be of the context ctxd estimated at raw (uncalibrated): their ratio
// within the calibrator's plausible factors. A count far outside is of
// something else — a transcript that starts mid-session, a test's made-up
// usage, an error body of another request — and anchors nothing.
func plausibleCount(count, raw uint64) bool {
	if count == 0 || raw < history.MinCalibrationTokens {
		return false
	}
	r := float64(count) / float64(raw)
	return r >= history.MinFactor && r <= history.MaxFactor
}

// scaled is a whole context's estimate in the provider's tokens, for raw,
// ctxd's uncalibrated estimate of it: anchored at the provider's newest
// count of a whole request (anchor) when there is one — that count, less
// (or plus) ctxd's calibrated estimate of what changed since — else the
// calibrated estimate. Never less than raw's calibrated estimate's half
// (a count that far below ctxd's estimate of what remains is stale).
func (e *Engine) scaled(s *session, raw uint64) uint64 {
	est := e.calibrate(s, raw)
	if s.anchor == 0 {
		return est
	}
	var n uint64
	if raw >= s.anchorRaw {
		n = s.anchor + e.calibrate(s, raw-s.anchorRaw)
	} else if d := e.calibrate(s, s.anchorRaw-raw); d < s.anchor {
		n = s.anchor - d
	}
	return max(n, est/2)
}

// carriedTokens is the sent-form estimate of the requests the latest
// checkpoint carries outside its summary, uncalibrated.
func (s *session) carriedTokens() uint64 {
	var n uint64
	for _, en := range []*entry{s.firstPinned, s.keptReq} {
		if en != nil {
			n += en.tokens
		}
	}
	return n
}

// check decides signal sig for the session now and records it as the last
// check. An automatic signal over the threshold does not compact when
// nothing could be compacted or when compaction is futile (docs/design.md §5.2);
// the first futile check of a run records one diagnostic event. Called with
// s.mu held.
func (e *Engine) check(ctx context.Context, s *session, sig trigger.Signal) trigger.Decision {
	tokens, source := e.estimate(s)
	d, futile := e.decide(s, sig, tokens)
	s.lastFutile = futile
	s.lastCheck = Check{Time: e.opts.Now().UTC(), Signal: sig, Tokens: tokens, Source: source,
		Threshold: s.shownThreshold(), Fired: d.Compact, Reason: d.Reason}
	if futile && !s.futilityRun {
		s.futilityRun = true
		fixed, _ := e.fixedFigure(s, tokens)
		data, _ := json.Marshal(map[string]any{"level": api.DiagLevelWarn, "code": api.DiagFutile, "message": d.Reason,
			"fixed_prefix_tokens": fixed, "threshold": s.threshold})
		if seq, err := e.opts.Log.Append(context.WithoutCancel(ctx), s.id, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic, Data: data}}); err == nil {
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
			_, source := e.estimate(s)
			why += fmt.Sprintf("; ctxd's own estimate of the prefix, %d tokens, is more than the provider counted for the whole context (%s), so the provider's figure stands", e.fixedPrefix(s), e.sizeText(s, tokens, source))
		}
		return trigger.Decision{Reason: why}, true
	}
	if why := e.nothingToCompact(s, sig); why != "" {
		s.nothingAtCheck = true
		return trigger.Decision{Reason: fmt.Sprintf("%s: %d tokens is at or above the threshold of %d, but nothing to compact: %s", sig, tokens, s.threshold, why)}, false
	}
	return d, false
}

// fixedPrefix is what no compaction can remove, calibrated: system prompt,
// tools, pinned context and the requests a compaction carries (docs/design.md
// §5.2). Called with s.mu held.
func (e *Engine) fixedPrefix(s *session) uint64 {
	return e.calibrate(s, s.fixedTokens+e.carriedEstimate(s))
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

// openRound reports whether a tool call of the session waits on its result.
func (s *session) openRound() bool { return len(s.state.Open()) > 0 }

// inThinkingLoop reports whether an open tool loop of a thinking-bound model
// is in progress: the newest message is a tool result or an assistant
// message whose calls wait on their results, and the newest assistant
// message carries thinking. The provider then requires that message to be
// sent with its thinking first, so no rewrite may withhold it (docs/design.md
// §4a): passes and prompt or tool changes wait for the loop's end (the next
// user prompt), and a compaction folds the loop.
func (s *session) inThinkingLoop() bool {
	if !s.model.ThinkingBinding || len(s.active) == 0 {
		return false
	}
	if s.active[len(s.active)-1].msg.Role != history.RoleTool && !s.openRound() {
		return false
	}
	for i := len(s.active) - 1; i >= 0; i-- {
		if m := s.active[i].msg; m.Role == history.RoleAssistant {
			return contextedit.HasThinking(m)
		}
	}
	return false
}

// newGroupSinceCheckpoint: something was appended after the latest
// checkpoint's snapshot (the no-loop rule of docs/design.md §5.1).
func (s *session) newGroupSinceCheckpoint() bool {
	if s.cp == nil {
		return len(s.active) > 0
	}
	return s.lastMsg > s.cp.SnapshotSeq
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
