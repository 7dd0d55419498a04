package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/contextedit"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// Assembled is what the agent sends next (docs/design.md §4), provider-neutral:
// the system prompt, the tool definitions, then Messages — pinned context,
// the latest checkpoint's summary, the retained recent messages and every
// message appended after the checkpoint's snapshot, with context editing
// applied.
type Assembled struct {
	Model    string            `json:"model,omitempty"`
	System   string            `json:"system,omitempty"`
	Tools    []history.ToolDef `json:"tools,omitempty"`
	Messages []history.Message `json:"messages"`
	// Tokens is the estimate of the whole context, in tokens, and
	// TokensSource whether it rests on reported usage.
	Tokens       uint64 `json:"tokens"`
	TokensSource string `json:"tokens_source"`
	// Threshold and ContextLimit are in tokens, 0 while the window is
	// unknown; WindowSource says where the window came from (Window*).
	Threshold    uint64 `json:"threshold"`
	ContextLimit uint64 `json:"context_limit"`
	WindowSource string `json:"window_source,omitempty"`
	// CheckpointSeq is the seq of the checkpoint the context starts from,
	// 0 before the first.
	CheckpointSeq uint64 `json:"checkpoint_seq,omitempty"`
	// LastSeq is the newest event's seq when the context was assembled.
	LastSeq uint64 `json:"last_seq"`
	// Compacted: the pre-send check compacted before assembling.
	Compacted bool `json:"compacted,omitempty"`
	// Diagnostic says why a pre-send compaction failed; the context is then
	// the uncompacted one.
	Diagnostic string `json:"diagnostic,omitempty"`
	// DiagnosticCode is Diagnostic's stable code (api.Diag*), "" with none.
	DiagnosticCode string `json:"diagnostic_code,omitempty"`
	// ThinkingBinding: the model binds thinking to the prefix.
	ThinkingBinding bool `json:"-"`
	// ContextEditMode is the context-editing mode in effect ("local",
	// "server" or "off").
	ContextEditMode string `json:"-"`
	// ContextEditing is the session's [context_editing] configuration.
	ContextEditing config.ContextEditing `json:"-"`
	// Rules are the provider rules Messages satisfy (docs/design.md §4a), for
	// history.CheckRequest(history.Sendable(Messages), Rules): thinking on
	// when the model binds thinking and the newest assistant message
	// carries it; OpenTail while a tool call waits on its result.
	Rules history.Rules `json:"-"`
	// Violations are the provider rules Messages break: always empty
	// unless ContextOptions.Unchecked.
	Violations history.Violations `json:"-"`
	// Checked is the §4a check of history.Sendable(Messages), for a
	// caller that must check them under other Rules (the proxy, with the
	// thinking setting its client sent): Checked.Violations(rules) equals
	// history.CheckRequest(history.Sendable(Messages), rules) without
	// reading the messages again.
	Checked history.Checked `json:"-"`
}

// ContextOptions tune Context.
type ContextOptions struct {
	// NoPreSend skips the pre-send check (inspection: `ctxctl session
	// context` reads without compacting).
	NoPreSend bool
	// Unchecked returns a context that breaks a provider rule instead of
	// ErrProviderRule, with the violations in Assembled.Violations (for
	// `ctxctl replay`, which reports them; never for a context an agent
	// sends). The violation is still logged and counted.
	Unchecked bool
	// Earned: the upstream accepted the credential of the request this
	// context is for before (the provider proxy's). A pending staged
	// append then defers its pre-send compaction only while the context
	// fits the window: one over it would be refused for its length, and
	// the overflow compaction that follows the refusal costs as much
	// (stage.go).
	Earned bool
}

// Context returns the session's assembled context (docs/design.md §4). Unless
// opts.NoPreSend, it is the pre-send check (§5.1): when the estimate is at or
// above the threshold it waits for a compaction, bounded by the summarizer
// timeout, and on failure returns the uncompacted context with the diagnostic.
// The compaction runs ahead of background ones (workers.Waited), and the check
// waits at most one round of the pool: a context that still fits the window
// (estimate ≤ context limit) waits only when a worker takes its compaction
// within a short grace (250 ms), and a context over the window waits unless
// workers.size or more compactions other requests wait on are queued ahead of
// it; otherwise the uncompacted context is served at once with a diagnostic and
// the compaction stays queued, first among background work. A context that
// breaks a provider rule (§4a) is never returned: the violation is logged and
// counted, and Context returns ErrProviderRule. Errors: ErrInvalid,
// ErrNotFound, ErrProviderRule, ctx's.
func (e *Engine) Context(ctx context.Context, id string, opts ContextOptions) (*Assembled, error) {
	var diagnostic, code string
	compacted := false
	s, err := e.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	if !opts.NoPreSend {
		e.refresh(s)
		d := e.check(ctx, s, trigger.PreSend)
		// A staged append (the proxy's request the upstream has not
		// accepted yet) is not earned: its check queues no compaction
		// and no speculative summary before the commit (stage.go).
		over := s.limit > 0 && s.lastCheck.Tokens > s.limit
		held := !(d.Compact && over && opts.Earned) && e.heldForStage(s, d)
		deferred := held && d.Compact
		if deferred {
			diagnostic, code = "pre-send compaction "+deferredWork+": "+d.Reason, api.DiagNotCompacted
			d.Compact = false
		}
		if !d.Compact && !deferred && s.lastCheck.Tokens >= s.threshold {
			// Over the threshold with no compaction (the circuit is open,
			// compaction is futile or has nothing to replace): say why
			// with the context rather than leave the agent guessing.
			diagnostic = "no pre-send compaction: " + d.Reason
			switch {
			case s.lastFutile:
				code = api.DiagFutile
			case s.nothingAtCheck:
				code = api.DiagNothingToCompact
			case s.circuitOpen:
				code = api.DiagCircuitOpen
			default:
				code = api.DiagNotCompacted
			}
		}
		if !d.Compact && !held {
			e.maybePrepare(s)
		}
		tokens, _ := s.estimate()
		if d.Compact && tokens <= s.limit {
			// The context still fits the window: with speculative
			// summaries on, it waits for no summarizer call
			// (docs/design.md §5.1).
			if why := e.compactBehind(s); why != "" {
				d.Compact = false
				diagnostic, code = why, api.DiagSummaryPreparing
			}
		}
		if d.Compact {
			timeout := config.SummarizerTimeout(s.agentFile)
			// The context can still be sent as it is: the estimate is within
			// the window (the same test as the over-window diagnostic below).
			fits := tokens <= s.limit
			s.mu.Unlock()
			wctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
			err := e.compactAndWait(wctx, id, trigger.PreSend, fits)
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return nil, ctx.Err()
			case errors.Is(err, errQueuedBehind):
				diagnostic = "pre-send compaction " + err.Error() + "; the context is served uncompacted and the compaction runs when a worker frees"
				code = api.DiagCompactionQueued
			case errors.Is(err, ErrNothingToCompact):
				// An answer, not a failure (docs/design.md §5.2).
				diagnostic = "no pre-send compaction: nothing to compact: " + NothingToCompactReason(err)
				code = api.DiagNothingToCompact
			case err != nil:
				diagnostic = "pre-send compaction failed: " + err.Error()
				code = api.DiagCompactionFailed
			default:
				compacted = true
			}
			if s, err = e.lock(ctx, id); err != nil {
				return nil, err
			}
		}
	}
	defer s.mu.Unlock()
	a := e.assemble(s)
	if err := e.enforceRules(s, a); err != nil && !opts.Unchecked {
		return nil, err
	}
	a.Compacted = compacted
	a.Diagnostic, a.DiagnosticCode = diagnostic, code
	if a.ContextLimit > 0 && a.Tokens > a.ContextLimit {
		// Compaction could not bring it under (a stall, the circuit, or
		// fixed content larger than the window): say so rather than let the
		// provider's 400 be the first news.
		a.Diagnostic = joinNonEmpty(a.Diagnostic, fmt.Sprintf("the assembled context (%s) exceeds the context window of %d tokens", e.sizeText(s, a.Tokens, a.TokensSource), a.ContextLimit))
		if a.DiagnosticCode == "" {
			a.DiagnosticCode = api.DiagOverWindow
		}
	}
	return a, nil
}

// deferredWork says why a check of a staged append queued no compaction.
const deferredWork = "deferred until the upstream accepts the request"

// enforceRules checks the assembled context against the provider rules
// (docs/design.md §4a) and sets a.Rules. A violation is a bug of ctxd: it is
// logged with every violation and counted, and the context is withheld —
// an error the agent sees instead of the provider's 400 (docs/decisions.md
// "Provider rules: one validator"). Called with s.mu held.
func (e *Engine) enforceRules(s *session, a *Assembled) error {
	a.Rules = e.providerRules(s)
	a.Checked = s.rules.check(a.Messages)
	vs := a.Checked.Violations(a.Rules)
	if len(vs) == 0 {
		return nil
	}
	a.Violations = vs
	for _, v := range vs {
		e.metrics.ProviderRuleViolation(v.Rule)
	}
	e.log.Error("assembled context breaks a provider rule; not returned", "session", s.id, "violations", len(vs), "first", vs[0].Error(), "last_seq", s.lastSeq)
	return fmt.Errorf("session %q: %w", s.id, vs.Err())
}

// ruleCache is the §4a check (history.Checker) of the messages of the
// last assembled context, as keys that identify each message: between
// recorded rewrites a context only grows, and then only the new messages
// are read (the proxy's time to first byte).
type ruleCache struct {
	keys []msgKey
	chk  history.Checker
	read int // messages the last check read (tests)
}

// msgKey is an assembled message as the check reads it: its role, tool
// call id and blocks. The blocks are held, so a key whose blocks are the
// same slice (address and length) is the same message: nothing changes a
// block in place. A message rendered anew on every request (an elided
// result's stub, thinking withheld: engine.render) is a new slice each
// time, and is compared by what the rules read of each block (type, text,
// call id).
type msgKey struct {
	role    history.Role
	id      string
	content []history.Block
}

func keyOf(m *history.Message) msgKey {
	return msgKey{role: m.Role, id: m.ToolCallID, content: m.Content}
}

func (k *msgKey) same(m *history.Message) bool {
	if k.role != m.Role || k.id != m.ToolCallID || len(k.content) != len(m.Content) {
		return false
	}
	if len(m.Content) == 0 || &k.content[0] == &m.Content[0] {
		return true
	}
	for i := range m.Content {
		a, b := &k.content[i], &m.Content[i]
		if a.Type != b.Type || a.Text != b.Text || a.ID != b.ID {
			return false
		}
	}
	return true
}

// check returns the §4a check of history.Sendable(msgs). When the
// messages checked last are a prefix of msgs, unchanged, only the rest is
// read; otherwise (a compaction, a context-edit pass, a new session copy
// after a restart) all of msgs. Sendable works message by
// message, so Sendable of the rest extends Sendable of the prefix. Called
// with s.mu held.
func (c *ruleCache) check(msgs []history.Message) history.Checked {
	k := len(c.keys)
	if k > len(msgs) {
		k = 0
	}
	for i := 0; i < k; i++ {
		if !c.keys[i].same(&msgs[i]) {
			k = 0
		}
	}
	if k == 0 {
		clear(c.keys)
		c.keys, c.chk = c.keys[:0], history.Checker{}
	}
	for i := k; i < len(msgs); i++ {
		c.keys = append(c.keys, keyOf(&msgs[i]))
	}
	c.chk.Extend(history.Sendable(msgs[k:]))
	c.read = len(msgs) - k
	return c.chk.Checked()
}

// providerRules are the rules the session's context must satisfy: thinking
// on when the model binds thinking and the newest assistant message of the
// active history, as stored, carries thinking (the agent enabled it); calls
// waiting on their result accepted at the end (an inspection mid-round).
// Called with s.mu held.
func (e *Engine) providerRules(s *session) history.Rules {
	r := history.Rules{OpenTail: s.openRound()}
	if s.model.ThinkingBinding {
		for i := len(s.active) - 1; i >= 0; i-- {
			if m := s.active[i].msg; m.Role == history.RoleAssistant {
				if contextedit.HasThinking(m) {
					r.Thinking = history.ThinkingOn
				}
				break
			}
		}
	}
	return r
}

// compactBehind decides, for a pre-send check over the threshold whose
// context still fits the window, whether the context is served now,
// uncompacted, while its summary is made in the background — the
// diagnostic saying so — or the check compacts first (""). With
// speculative summaries on for the session, the check waits only for an
// install of a prepared summary (a checkpoint write): when the summary is
// still being made (the speculative job, or a compaction already calling
// the summarizer), or none can be installed (one step went from below the
// prepare mark past the threshold, or the fold would not fit), the
// compaction is queued first among background work and installed at a
// later request. With them off, or with the embedded extractive
// summarizer (no call to wait for), the check compacts at the trigger.
// Called with s.mu held; it may queue the compaction.
func (e *Engine) compactBehind(s *session) string {
	if e.shownPrepareMark(s) == 0 || e.summarizesLocally(s) {
		return ""
	}
	switch {
	case s.preparing():
		return "pre-send compaction: the speculative summary is still being made; the context fits the window and is served uncompacted, and the summary is installed when it is ready"
	case s.compacting && s.summarizing:
		return "pre-send compaction: the summary is being made in the background; the context fits the window and is served uncompacted, and the summary is installed when it is ready"
	case s.compacting || e.installable(s, trigger.PreSend, false) != nil:
		return ""
	}
	if _, err := e.submit(s.id, trigger.PreSend, workers.BackgroundFirst); err != nil {
		// Queue full or shutting down: the check's own submit says so.
		return ""
	}
	return "pre-send compaction: no speculative summary is ready (the context crossed the prepare mark and the threshold at once); the context fits the window and is served uncompacted, and the summary being made in the background is installed when it is ready"
}

// summarizesLocally reports whether the session's summary is made by the
// embedded extractive summarizer (its first binding): no call to wait
// for, so a pre-send check compacts at once. Called with s.mu held.
func (e *Engine) summarizesLocally(s *session) bool {
	bindings, _, why := e.sessionBindings(s)
	return why == "" && len(bindings) > 0 && bindings[0].Provider == config.ProviderExtractive
}

// startGrace is how long a pre-send check gives a free worker to take its
// compaction before it counts as queued behind others.
const startGrace = 250 * time.Millisecond

// errQueuedBehind: the pre-send compaction would not start soon (one
// round of the pool, or startGrace for a context that fits the window) and
// the caller goes on without it.
var errQueuedBehind = errors.New("compaction queued behind others")

// compactAndWait submits a compaction and waits for it, bounded by ctx.
// A request whose context still fits the window (fits) never takes a
// waited slot: its job is queued first among background work
// (workers.BackgroundFirst), and the request waits for it only when a
// worker takes it within startGrace. A request whose context cannot be sent
// as it is submits a Waited job and waits unless workers.size or more
// Waited jobs are queued ahead of it, which are then only such requests and
// explicit waits (docs/decisions.md "A pre-send read waits at
// most one round of the pool"). Not waiting returns an error wrapping
// errQueuedBehind, with the job left queued as background work.
func (e *Engine) compactAndWait(ctx context.Context, id string, sig trigger.Signal, fits bool) error {
	if fits {
		t, err := e.submit(id, sig, workers.BackgroundFirst)
		if err != nil {
			return err
		}
		grace := time.NewTimer(startGrace)
		defer grace.Stop()
		select {
		case <-t.Started():
		case <-t.Done():
		case <-grace.C:
			return fmt.Errorf("%w: no worker took it within %v", errQueuedBehind, startGrace)
		case <-ctx.Done():
			return ctx.Err()
		}
		return t.Wait(ctx)
	}
	t, err := e.submit(id, sig, workers.Waited)
	if err != nil {
		return err
	}
	if ahead, queued := e.opts.Pool.Ahead(t); queued && ahead >= e.opts.Pool.Size() {
		// Nobody waits on it now: requests that can be served within one
		// round of the pool go first.
		e.opts.Pool.Unwait(t)
		return fmt.Errorf("%w: %d compactions that requests wait on are queued ahead of it, %d workers", errQueuedBehind, ahead, e.opts.Pool.Size())
	}
	return t.Wait(ctx)
}

// assemble builds the context from the session's state. Called with s.mu
// held.
func (e *Engine) assemble(s *session) *Assembled {
	tokens, source := s.estimate()
	a := &Assembled{
		Model:           s.meta.Model,
		System:          s.system,
		Tools:           s.tools,
		Messages:        s.activeMessages(),
		Tokens:          tokens,
		TokensSource:    source,
		Threshold:       s.shownThreshold(),
		ContextLimit:    s.shownLimit(),
		WindowSource:    s.win.source,
		LastSeq:         s.lastSeq,
		ThinkingBinding: s.model.ThinkingBinding,
		ContextEditing:  s.cfg.ContextEditing,
		ContextEditMode: s.editMode,
	}
	if s.cp != nil {
		a.CheckpointSeq = s.cp.Seq
	}
	return a
}
