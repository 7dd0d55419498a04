package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/offload"
)

// CreateParams is a new session (docs/design.md §7 POST /v1/sessions).
type CreateParams struct {
	// ID is the session id; "" generates one.
	ID string
	// Model is the model id; looked up in the model catalog.
	Model string
	// ContextLimit is the session's own context window in tokens; 0 takes
	// the catalog's, and is required for a model the catalog lacks.
	ContextLimit uint64
	// System is the system prompt.
	System string
	// Tools are the tool definitions.
	Tools []history.ToolDef
	// Pinned is pinned context, sent as one user message after the tools
	// and before any summary: text, image and json blocks.
	Pinned []history.Block
	// Overlay is a TOML configuration overlay (docs/design.md §3), the highest
	// layer for this session.
	Overlay string
	// Labels are free-form operator labels, kept with the session.
	Labels map[string]string
	// WireContextLimit is the window the session's first request implies
	// (the proxy: Anthropic's context-1m-* beta), in tokens; 0 for none.
	// It replaces the catalog's window, never an operator's.
	WireContextLimit uint64
	// Provider is the wire API family of a proxied session
	// (ProviderAnthropic, ProviderOpenAI): the defaults of a model the
	// catalog lacks.
	Provider string
	// Staged creates the session in memory only (docs/design.md §10
	// "Recorded when accepted"): nothing is written until its first
	// staged append is committed, or any other write of its log, which
	// store the session first; DeleteSession, or the Discard of that
	// append, drops it with nothing stored. ErrExists is checked against
	// the log (a read) and the sessions in memory.
	Staged bool
}

// Info describes a session (docs/design.md §7 GET /v1/sessions/{id}).
type Info struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	// Updated is when the session last changed: its metadata (a PATCH),
	// an appended message or a checkpoint.
	Updated time.Time         `json:"updated"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Loaded is false for a listing entry (ListSessionPage) of a
	// session not in memory: only the fields from its metadata are set.
	Loaded bool `json:"loaded"`
	// Auto is context_compaction.auto in effect.
	Auto  bool   `json:"auto"`
	Model string `json:"model,omitempty"`
	// ContextLimit is the context window in tokens, 0 while unknown;
	// WindowSource where it came from (WindowSession, WindowConfig,
	// WindowCatalog, WindowWire, WindowLearned, WindowUnknown).
	ContextLimit uint64 `json:"context_limit"`
	WindowSource string `json:"window_source,omitempty"`
	// Threshold is the automatic compaction threshold in tokens, 0 while
	// the window is unknown.
	Threshold uint64 `json:"threshold"`
	// SettingsDiff says what the settings stored with the session differ
	// in from the current configuration's entry of its model (doctor).
	SettingsDiff []string `json:"settings_diff,omitempty"`
	// PrepareMark is the token count at which the session prepares a
	// speculative summary (docs/design.md §5.1); 0 when it prepares none
	// (off, window unknown, or derived and paid by the client's key).
	// IdleCompaction says whether it is compacted before an idle prompt
	// cache lapses (context_compaction.idle). Both are set by Session
	// only (0 and false in listings).
	PrepareMark    uint64 `json:"prepare_mark,omitempty"`
	IdleCompaction bool   `json:"idle_compaction,omitempty"`
	// Tokens is the assembled context's size in tokens; TokensSource is
	// "reported" or "estimated".
	Tokens       uint64 `json:"tokens"`
	TokensSource string `json:"tokens_source"`
	// Messages is the number of messages in the log, every original
	// message, compacted or not; ActiveMessages those in the active
	// history. LastSeq is the newest event's seq.
	Messages       uint64 `json:"messages"`
	ActiveMessages int    `json:"active_messages"`
	LastSeq        uint64 `json:"last_seq"`
	OpenRound      bool   `json:"open_round,omitempty"`
	// OpenToolCalls is the number of tool calls waiting on their result.
	OpenToolCalls int `json:"open_tool_calls,omitempty"`
	// Checkpoints is the number of checkpoints.
	Checkpoints uint64 `json:"checkpoints"`
	// Compaction is "idle", "queued" or "running".
	Compaction  string `json:"compaction"`
	CircuitOpen bool   `json:"circuit_open,omitempty"`
	Failures    int    `json:"failures,omitempty"`
	// Checkpoint is the newest checkpoint without its summary text, nil
	// before the first.
	Checkpoint *checkpoint.Checkpoint `json:"checkpoint,omitempty"`
	// Shape is the compaction shape in effect.
	Shape string `json:"shape"`
	// ServerShape says, for shape "server", whether the provider compacts
	// this session or why it falls back to the summarizer (docs/design.md §10);
	// nil for the other shapes.
	ServerShape *ServerShape `json:"server_shape,omitempty"`
	// SystemDigest and ToolsDigest identify the system prompt and tool set.
	SystemDigest string `json:"system_digest,omitempty"`
	ToolsDigest  string `json:"tools_digest,omitempty"`
	// LastCheck says why compaction did or did not fire at the last
	// check, for `ctxctl doctor`; nil before the first.
	LastCheck *Check `json:"last_check,omitempty"`
	// LastError is the newest compaction failure of this run, if any.
	LastError string `json:"last_error,omitempty"`
	// Factor is the model's token calibration factor.
	Factor float64 `json:"token_factor"`
	// EditedTokens is what context editing and withheld thinking remove
	// from the active messages as stored, in uncalibrated tokens.
	EditedTokens uint64 `json:"edited_tokens,omitempty"`
	// ContextEditMode is the context-editing mode in effect ("local",
	// "server" or "off") and ContextEditWhy the reason (docs/design.md §6).
	ContextEditMode string `json:"context_edit_mode"`
	ContextEditWhy  string `json:"context_edit_why,omitempty"`
	// Rewrites weighs what the session's passes and compactions cost in
	// cache writes against what they saved over the requests that
	// followed (docs/design.md §4); nil before the first.
	Rewrites *RewriteFigures `json:"rewrites,omitempty"`
	// ContextEditPasses is the number of context-edit passes recorded.
	ContextEditPasses int `json:"context_edit_passes,omitempty"`
	// Offloads is the number of tool results offloaded.
	Offloads int `json:"offloads,omitempty"`
	// Mode is the session's own proxy mode ("enforce" or "observe"; ""
	// follows [proxy] mode) and Ledger its savings ledger in brief (nil
	// before the first entry; docs/design.md §10).
	Mode   string          `json:"mode,omitempty"`
	Ledger *ledger.Summary `json:"ledger,omitempty"`
	// Warnings, set by CreateSession only, say what in the session's
	// settings works against it (docs/design.md §5.2 futility).
	Warnings []string `json:"warnings,omitempty"`
}

// CreateSession creates a session. Errors: ErrInvalid (*FieldError: id,
// model, context_limit, config, tools), ErrExists.
func (e *Engine) CreateSession(ctx context.Context, p CreateParams) (Info, error) {
	if p.ID == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		p.ID = "s-" + hex.EncodeToString(b[:])
	}
	if err := validID(p.ID); err != nil {
		return Info{}, err
	}
	if err := checkTools(p.Tools); err != nil {
		return Info{}, err
	}
	if err := checkPinned(p.Pinned); err != nil {
		return Info{}, err
	}
	provider := p.Provider
	if provider != ProviderAnthropic && provider != ProviderOpenAI {
		provider = ""
	}
	extra, _ := json.Marshal(sessionExtra{Pinned: p.Pinned, WireLimit: p.WireContextLimit, Provider: provider})
	meta := checkpoint.Meta{
		Model:              p.Model,
		ContextLimit:       p.ContextLimit,
		SystemPrompt:       p.System,
		SystemPromptDigest: digest([]byte(p.System)),
		Tools:              toolsJSON(p.Tools),
		Overlay:            p.Overlay,
		Labels:             p.Labels,
		Extra:              extra,
	}
	meta.ToolsDigest = digest(meta.Tools)
	// Validate model, limit and overlay before anything is stored.
	probe := &session{id: p.ID, meta: meta, sessionState: newSessionState()}
	if err := e.configure(probe); err != nil {
		return Info{}, err
	}
	if probe.win.source == WindowUnknown && provider == "" {
		// A client of the daemon API gives the window it knows; only a
		// proxied session, whose client cannot, learns it from the provider.
		return Info{}, invalidField("context_limit", "model %q is not in the model catalog: give the session's context_limit", p.Model)
	}
	// The session carries its own settings from now on (docs/decisions.md
	// "Model entries and context windows").
	meta = storeSettings(meta, probe.win)
	probe.meta = meta
	if p.Staged {
		if err := e.holdUnstored(ctx, probe); err != nil {
			return Info{}, err
		}
	} else {
		if e.unstoredHeld(p.ID) {
			return Info{}, mapLogErr(p.ID, checkpoint.ErrExists)
		}
		stored, err := e.opts.Log.CreateSession(ctx, p.ID, meta)
		if err != nil {
			return Info{}, mapLogErr(p.ID, err)
		}
		probe.meta = stored
		probe.lastUsed.Store(e.opts.Now().UnixNano())
		e.mu.Lock()
		e.sessions[p.ID] = probe
		e.evictLocked(p.ID)
		e.mu.Unlock()
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	e.saveRow(probe)
	in := e.info(probe)
	in.Warnings = createWarnings(probe)
	return in, nil
}

// createWarnings says what in a new session's settings works against it:
// a trigger whose buffer_tokens reaches the window leaves a threshold of 0,
// where every compaction is futile (docs/design.md §5.2).
func createWarnings(s *session) []string {
	var out []string
	if b := s.cfg.ContextCompaction.Trigger.BufferTokens; b > 0 && b >= s.limit {
		out = append(out, fmt.Sprintf("context_compaction.trigger.buffer_tokens = %d is at or above the context window of %d tokens: the threshold is 0 and automatic compaction never runs for this session", b, s.limit))
	}
	return out
}

// checkPinned validates pinned context as the content of a user message.
func checkPinned(blocks []history.Block) error {
	if len(blocks) == 0 {
		return nil
	}
	if err := (&history.State{}).Check(pinnedMessage(blocks)); err != nil {
		var ve *history.ValidationError
		if errors.As(err, &ve) {
			return invalidField("pinned"+strings.TrimPrefix(ve.Field, "content"), "%s", ve.Message)
		}
		return invalidField("pinned", "%v", err)
	}
	return nil
}

func checkTools(tools []history.ToolDef) error {
	seen := map[string]bool{}
	for i, t := range tools {
		if t.Name == "" {
			return invalidField(fmt.Sprintf("tools[%d].name", i), "a tool needs a name")
		}
		if seen[t.Name] {
			return invalidField(fmt.Sprintf("tools[%d].name", i), "tool %q is defined twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.InputSchema) > 0 && !json.Valid(t.InputSchema) {
			return invalidField(fmt.Sprintf("tools[%d].input_schema", i), "not valid JSON")
		}
	}
	return nil
}

// Session describes session id. Errors: ErrInvalid, ErrNotFound.
func (e *Engine) Session(ctx context.Context, id string) (Info, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return Info{}, err
	}
	defer s.mu.Unlock()
	e.refresh(s)
	in := e.info(s)
	// Set here only, not in listings: they ask for the session's
	// summarizer bindings.
	in.PrepareMark = e.shownPrepareMark(s)
	in.IdleCompaction = s.win.source != WindowUnknown && e.idleEnabled(s)
	return in, nil
}

// rewriteFigure is one recorded rewrite: the tokens the next request had
// to write to the prompt cache again from the rewrite point on
// (rewritten), the tokens each later request no longer sends (saved),
// and the number of assistant answers the session had then (at).
type rewriteFigure struct {
	rewritten, saved uint64
	at               uint64
	compaction       bool
}

// RewriteFigures weighs a session's recorded rewrites (docs/design.md
// §4), in ctxd's estimated tokens, and in cost units of one uncached input
// token at the prompt cache's prices (a write 1.25, a read 0.1).
type RewriteFigures struct {
	// Passes and Compactions count the rewrites.
	Passes      int `json:"passes"`
	Compactions int `json:"compactions"`
	// RewrittenTokens is what the rewrites made the requests after them
	// write to the cache again, instead of reading it.
	RewrittenTokens uint64 `json:"rewritten_tokens"`
	// SavedTokens is what the requests after each rewrite did not send,
	// summed over those requests (one per assistant answer since).
	SavedTokens uint64 `json:"saved_tokens"`
	// Cost is RewrittenTokens × (1.25 − 0.1); Savings is SavedTokens ×
	// 0.1 (each of those tokens would have been a cache read); Net is
	// Savings − Cost: positive once the rewrites have paid for themselves.
	Cost    float64 `json:"cost"`
	Savings float64 `json:"savings"`
	Net     float64 `json:"net"`
	// DeferredPasses counts the context-edit passes deferred since the
	// session was loaded because their savings before the next compaction
	// would not pay for their rewrite (contextedit.Weighing.PaysBack; in
	// memory only: the next append weighs again). DeferredCost and
	// DeferredSavings are the newest one's, in the units of Cost and
	// Savings: what it would have cost and saved over its Requests.
	DeferredPasses  uint64  `json:"deferred_passes,omitempty"`
	DeferredCost    float64 `json:"deferred_cost,omitempty"`
	DeferredSavings float64 `json:"deferred_savings,omitempty"`
}

// rewriteFigures sums s's rewrites; nil when there is none. Called with
// s.mu held.
func rewriteFigures(s *session) *RewriteFigures {
	if len(s.rewrites) == 0 && s.deferredPasses == 0 {
		return nil
	}
	f := &RewriteFigures{DeferredPasses: s.deferredPasses}
	if d := s.lastDeferred; s.deferredPasses > 0 {
		f.DeferredCost = math.Round(11.5*float64(d.RewrittenTokens)) / 10
		f.DeferredSavings = float64(d.SavedTokens*d.Requests) / 10
	}
	for _, r := range s.rewrites {
		if r.compaction {
			f.Compactions++
		} else {
			f.Passes++
		}
		f.RewrittenTokens += r.rewritten
		if s.assistants > r.at {
			f.SavedTokens += r.saved * (s.assistants - r.at)
		}
	}
	// To a tenth of a token, as they are shown.
	f.Cost = math.Round(11.5*float64(f.RewrittenTokens)) / 10
	f.Savings = float64(f.SavedTokens) / 10
	f.Net = math.Round(10*(f.Savings-f.Cost)) / 10
	return f
}

func (e *Engine) info(s *session) Info {
	tokens, source := s.estimate()
	in := Info{
		ID:             s.id,
		Created:        s.meta.Created,
		Updated:        s.updated(),
		Labels:         s.meta.Labels,
		Loaded:         true,
		Auto:           s.cfg.ContextCompaction.Auto,
		Model:          s.meta.Model,
		ContextLimit:   s.shownLimit(),
		WindowSource:   s.win.source,
		Threshold:      s.shownThreshold(),
		SettingsDiff:   s.win.diff,
		Tokens:         tokens,
		TokensSource:   source,
		Messages:       s.messages,
		ActiveMessages: len(s.active),
		LastSeq:        s.lastSeq,
		OpenRound:      s.openRound(),
		OpenToolCalls:  len(s.state.Open()),
		Checkpoints:    s.checkpoints,
		Rewrites:       rewriteFigures(s),
		Compaction:     "idle",
		CircuitOpen:    s.circuitOpen,
		Failures:       s.failures,
		Shape:          s.shape,
		SystemDigest:   s.meta.SystemPromptDigest,
		ToolsDigest:    s.meta.ToolsDigest,
		LastError:      s.lastError,
		Factor:         s.factor(),
	}
	switch {
	case s.compacting:
		in.Compaction = "running"
	case e.runningElsewhere(s.id):
		in.Compaction = "running"
	case e.opts.Pool.Active(s.id) != nil:
		in.Compaction = "queued"
	}
	if !s.lastCheck.Time.IsZero() {
		c := s.lastCheck
		in.LastCheck = &c
	}
	if s.cp != nil {
		cp := *s.cp
		cp.Summary = ""
		in.Checkpoint = &cp
	}
	for _, en := range s.active {
		if en.msg.Tokens > en.tokens {
			in.EditedTokens += en.msg.Tokens - en.tokens
		}
	}
	in.ContextEditMode, in.ContextEditWhy = s.editMode, s.editWhy
	if sh := e.serverShape(s); sh.Why != "" {
		in.ServerShape = &sh
	}
	in.ContextEditPasses = s.ledger.Passes()
	in.Offloads = len(s.offloads)
	in.Mode, in.Ledger = s.mode, s.totals.Summary()
	return in
}

// ListSessions returns the ids of every stored session, sorted.
func (e *Engine) ListSessions(ctx context.Context) ([]string, error) {
	return e.opts.Log.ListSessions(ctx)
}

// listRow is what a listing shows of a session not in memory (its message
// count, tokens and threshold; docs/decisions.md "Listing rows"), kept in the
// log beside the metadata (checkpoint.Log.PutRow) after every change of those
// figures: creation, an append, a compaction, a PATCH, a load.
type listRow struct {
	Messages       uint64 `json:"messages"`
	ActiveMessages int    `json:"active_messages"`
	Tokens         uint64 `json:"tokens"`
	TokensSource   string `json:"tokens_source,omitempty"`
	Threshold      uint64 `json:"threshold"`
	ContextLimit   uint64 `json:"context_limit"`
	WindowSource   string `json:"window_source,omitempty"`
	Auto           bool   `json:"auto"`
	Shape          string `json:"shape,omitempty"`
	// LastSeq is the session's last seq when the row was written.
	LastSeq uint64 `json:"last_seq"`
	// Updated is the session's Info.Updated when the row was written
	// (zero in rows of an older ctxd: the meta's then stands).
	Updated time.Time `json:"updated,omitzero"`
	// Mode and Ledger are Info's.
	Mode   string          `json:"mode,omitempty"`
	Ledger *ledger.Summary `json:"ledger,omitempty"`
}

// saveRow hands the session's listing row to the log, which writes it with
// the next group commit (no wait, no sync of its own). Called with s.mu
// held.
func (e *Engine) saveRow(s *session) {
	tokens, source := s.estimate()
	b, err := json.Marshal(listRow{Messages: s.messages, ActiveMessages: len(s.active), Tokens: tokens, TokensSource: source,
		Threshold: s.shownThreshold(), ContextLimit: s.shownLimit(), WindowSource: s.win.source, Auto: s.cfg.ContextCompaction.Auto, Shape: s.shape, LastSeq: s.lastSeq, Updated: s.updated(),
		Mode: s.mode, Ledger: s.totals.Summary()})
	if err == nil {
		if sum := xxh3.Hash(b); sum != s.rowSum {
			// A change the listing shows (a reload that changes nothing
			// is not one).
			s.rowSum = sum
			e.changes.note(s.id)
		}
		if !e.holdRow(s.id, b) {
			err = e.opts.Log.PutRow(s.id, b)
		}
	}
	if err != nil && !errors.Is(err, checkpoint.ErrClosed) {
		e.log.Warn("listing row not saved", "session", s.id, "err", err)
	}
}

// saveRowOf saves session id's listing row after a change made outside a
// request (a compaction job), when the session still exists.
func (e *Engine) saveRowOf(ctx context.Context, id string) {
	s, err := e.lock(context.WithoutCancel(ctx), id)
	if err != nil {
		return
	}
	e.saveRow(s)
	s.mu.Unlock()
}

// Listing limits for ListSessionPage.
const (
	// DefaultListLimit is the page size when the caller gives none.
	DefaultListLimit = 100
	// MaxListLimit is the largest page.
	MaxListLimit = 1000
)

// ListSessionPage describes at most limit sessions after the session id
// after ("" for the first page), in the log's key order (id + "/"
// bytewise; checkpoint.Log.ListPage), and returns the id to pass as after
// for the next page ("" after the last). It loads no session it can
// describe from its listing row: a session in memory gets its full Info
// (on a fleet, Options.Shared, reloaded first when the log's last seq is
// not the loaded copy's: every node's listing agrees with the store);
// any other its metadata and row (Loaded false), with messages appended
// after the row was written (a crash before the row landed) counted from
// the log. A session with no row yet (stored by an older ctxd) is read
// once from its log, without joining the loaded sessions, and its row
// written. The work is bounded by the page, not by the sessions stored.
// limit 0 means DefaultListLimit. Errors: ErrInvalid (*FieldError: after,
// limit), the log's.
func (e *Engine) ListSessionPage(ctx context.Context, after string, limit int) ([]Info, string, error) {
	if after != "" {
		if err := checkpoint.ValidSessionID(after); err != nil {
			return nil, "", &FieldError{Field: "after", Err: fmt.Errorf("%w: %v", ErrInvalid, err)}
		}
	}
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return nil, "", invalidField("limit", "must be between 1 and %d, got %d", MaxListLimit, limit)
	}
	page, more, err := e.opts.Log.ListPage(ctx, after, limit)
	if err != nil {
		return nil, "", mapLogErr(after, err)
	}
	out := make([]Info, 0, len(page))
	for _, l := range page {
		in, ok := e.loadedInfo(l.ID)
		if ok && e.opts.Shared && in.LastSeq != l.LastSeq {
			// Another node changed the session since this one loaded it
			// (docs/design.md §9): describe it as the log has it, as
			// Session would, not from the stale copy.
			in, err = e.Session(ctx, l.ID)
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, "", err
			}
		}
		if !ok {
			in, err = e.rowInfo(ctx, l)
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, "", err
			}
		}
		out = append(out, in)
	}
	next := ""
	if more && len(page) > 0 {
		next = page[len(page)-1].ID
	}
	return out, next, nil
}

// loadedInfo returns the full Info of session id when it is in memory.
func (e *Engine) loadedInfo(id string) (Info, bool) {
	e.mu.Lock()
	s := e.sessions[id]
	e.mu.Unlock()
	if s == nil {
		return Info{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.evicted {
		return Info{}, false
	}
	return e.info(s), true
}

// rowInfo describes a session not in memory from its listing row.
func (e *Engine) rowInfo(ctx context.Context, l checkpoint.Listed) (Info, error) {
	meta := l.Meta
	in := Info{ID: l.ID, Created: meta.Created, Updated: meta.Updated, Labels: meta.Labels,
		Model: meta.Model, ContextLimit: meta.ContextLimit, LastSeq: l.LastSeq, Checkpoints: meta.Checkpoints,
		SystemDigest: meta.SystemPromptDigest, ToolsDigest: meta.ToolsDigest, Compaction: "idle"}
	var row listRow
	if len(l.Row) == 0 || json.Unmarshal(l.Row, &row) != nil {
		// No row yet: read the session once, as a load would, and keep
		// its row for the next listing.
		s, err := e.load(ctx, l.ID)
		if err != nil {
			return Info{}, err
		}
		e.saveRow(s)
		in := e.info(s)
		in.Loaded = false
		return in, nil
	}
	in.Messages, in.ActiveMessages = row.Messages, row.ActiveMessages
	in.Tokens, in.TokensSource = row.Tokens, row.TokensSource
	in.Threshold, in.ContextLimit, in.Auto, in.Shape = row.Threshold, row.ContextLimit, row.Auto, row.Shape
	in.Mode, in.Ledger = row.Mode, row.Ledger
	in.WindowSource = row.WindowSource
	if row.Updated.After(in.Updated) {
		in.Updated = row.Updated
	}
	if row.LastSeq < l.LastSeq {
		// Events after the row (its write was lost in a crash): count
		// their messages, at their o200k estimates.
		err := e.opts.Log.Range(ctx, l.ID, row.LastSeq+1, func(ev checkpoint.Event) error {
			if ev.Kind == checkpoint.KindMessage && ev.Message != nil {
				if ev.Time.After(in.Updated) {
					in.Updated = ev.Time
				}
				in.Messages++
				in.ActiveMessages++
				in.Tokens += ev.Message.Tokens
				in.TokensSource = "estimated"
			}
			return nil
		})
		if err != nil {
			return Info{}, mapLogErr(l.ID, err)
		}
	}
	return in, nil
}

// CountSessions returns the number of stored sessions.
func (e *Engine) CountSessions(ctx context.Context) (int, error) {
	return e.opts.Log.CountSessions(ctx)
}

// Exists reports whether session id exists, without loading it.
// Errors: ErrInvalid, the log's.
func (e *Engine) Exists(ctx context.Context, id string) (bool, error) {
	if err := validID(id); err != nil {
		return false, err
	}
	_, err := e.opts.Log.GetMeta(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, checkpoint.ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// Patch changes a session's system prompt, tools, pinned context or model;
// a nil field is left as it is (docs/design.md §7 PATCH).
type Patch struct {
	System       *string
	Tools        *[]history.ToolDef
	Pinned       *[]history.Block
	Model        *string
	ContextLimit *uint64
}

// UpdateSession applies p. A changed system prompt or tool set (detected by
// digest) is a recorded rewrite: a session_updated event and, for models
// that bind thinking to the prefix, a prefix_reset that stops the replay of
// earlier thinking (docs/design.md §4). Inside an open tool loop of such a model
// (see inThinkingLoop) a change of system prompt or tool set takes effect
// when the loop ends (§4a): the whole patch is recorded as pending (a
// session_updated event with deferred_meta) and applied by the append that
// ends the loop; until then the context keeps the old prompt, tools and the
// loop's thinking. Errors: ErrInvalid, ErrNotFound.
func (e *Engine) UpdateSession(ctx context.Context, id string, p Patch) (Info, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return Info{}, err
	}
	defer s.mu.Unlock()
	cur := s.meta
	if s.pending != nil {
		cur = *s.pending // a later patch builds on the pending one
	}
	meta := cur
	if p.System != nil {
		meta.SystemPrompt = *p.System
		meta.SystemPromptDigest = digest([]byte(*p.System))
	}
	if p.Tools != nil {
		if err := checkTools(*p.Tools); err != nil {
			return Info{}, err
		}
		meta.Tools = toolsJSON(*p.Tools)
		meta.ToolsDigest = digest(meta.Tools)
	}
	var extra sessionExtra
	if len(meta.Extra) > 0 {
		_ = json.Unmarshal(meta.Extra, &extra)
	}
	if p.Pinned != nil {
		if err := checkPinned(*p.Pinned); err != nil {
			return Info{}, err
		}
		extra.Pinned = *p.Pinned
	}
	newModel := p.Model != nil && *p.Model != meta.Model
	if newModel {
		// Another model: its settings are the current configuration's,
		// stored anew; what was learned of the old one's window is not its.
		meta.Model = *p.Model
		extra.Settings, extra.Learned, extra.WireLimit = nil, nil, 0
	}
	if p.Pinned != nil || newModel {
		meta.Extra, _ = json.Marshal(extra)
	}
	if p.ContextLimit != nil {
		meta.ContextLimit = *p.ContextLimit
	}
	probe := &session{id: id, meta: meta, sessionState: sessionState{state: s.state}}
	if err := e.configure(probe); err != nil {
		return Info{}, err
	}
	if newModel {
		meta = storeSettings(meta, probe.win)
	}
	if metaEqual(meta, cur) {
		return e.info(s), nil // nothing changed: nothing to record
	}
	if (meta.SystemPromptDigest != s.meta.SystemPromptDigest || meta.ToolsDigest != s.meta.ToolsDigest) && s.inThinkingLoop() {
		d, _ := json.Marshal(deferredUpdate{DeferredMeta: &meta, Message: "the system prompt or tool set changes when the open tool loop ends (docs/design.md §4a)"})
		seq, err := e.opts.Log.Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindSessionUpdated, Data: d}})
		if err != nil {
			return Info{}, mapLogErr(id, err)
		}
		s.lastSeq = seq
		s.pending = &meta
		s.touch(e.opts.Now().UTC())
		return e.info(s), nil
	}
	if _, err := e.commitUpdate(ctx, s, meta); err != nil {
		return Info{}, err
	}
	e.saveRow(s)
	return e.info(s), nil
}

// deferredUpdate is the Data of a session_updated event that records a
// patch waiting for the end of an open tool loop.
type deferredUpdate struct {
	DeferredMeta *checkpoint.Meta `json:"deferred_meta"`
	Message      string           `json:"message"`
}

// commitUpdate stores meta as the session's and applies it: session_updated
// and, for a changed system prompt or tool set of a thinking-bound model, a
// prefix_reset withholding the thinking before it, all in one write. It
// clears a pending patch. It returns the events written, with their seqs.
// Called with s.mu held.
func (e *Engine) commitUpdate(ctx context.Context, s *session, meta checkpoint.Meta) ([]checkpoint.Event, error) {
	probe := &session{id: s.id, meta: meta, sessionState: sessionState{state: s.state}}
	if err := e.configure(probe); err != nil {
		return nil, err
	}
	var causes []string
	if meta.SystemPromptDigest != s.meta.SystemPromptDigest {
		causes = append(causes, "system_prompt")
	}
	if meta.ToolsDigest != s.meta.ToolsDigest {
		causes = append(causes, "tools")
	}
	upd, _ := json.Marshal(map[string]any{
		"system_prompt_digest": meta.SystemPromptDigest,
		"tools_digest":         meta.ToolsDigest,
		"model":                meta.Model,
		"changed":              causes,
	})
	events := []checkpoint.Event{{Kind: checkpoint.KindSessionUpdated, Data: upd}}
	withheld := s.ledger.WithheldThinkingBefore()
	if len(causes) > 0 && probe.model.ThinkingBinding && s.lastMsg > 0 {
		withheld = s.lastMsg + 1
		d, _ := json.Marshal(prefixReset{Cause: causes[0], WithheldBefore: withheld})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindPrefixReset, Data: d})
	}
	first, err := e.opts.Log.PutMeta(ctx, s.id, meta, events...)
	if err != nil {
		return nil, mapLogErr(s.id, err)
	}
	s.meta = meta
	s.pending = nil
	s.lastSeq = first + uint64(len(events)) - 1
	s.touch(e.opts.Now().UTC())
	for i := range events {
		events[i].Seq = first + uint64(i)
	}
	if err := e.configure(s); err != nil {
		return events, err
	}
	if withheld != s.ledger.WithheldThinkingBefore() {
		s.ledger.Withhold(withheld)
		s.retokenize()
	}
	return events, nil
}

// applyPending applies a patch deferred by an open tool loop once the loop
// has ended (docs/design.md §4a), returning the events written. A failure is
// logged; the next append retries. Called with s.mu held.
func (e *Engine) applyPending(ctx context.Context, s *session) []checkpoint.Event {
	if s.pending == nil || s.inThinkingLoop() {
		return nil
	}
	events, err := e.commitUpdate(ctx, s, *s.pending)
	if err != nil {
		e.log.Warn("applying a session update deferred by a tool loop", "session", s.id, "err", err)
	}
	return events
}

// metaEqual reports whether a PATCH changed nothing a session is assembled
// from.
func metaEqual(a, b checkpoint.Meta) bool {
	return a.SystemPromptDigest == b.SystemPromptDigest && a.ToolsDigest == b.ToolsDigest &&
		a.Model == b.Model && a.ContextLimit == b.ContextLimit && bytes.Equal(a.Extra, b.Extra)
}

// DeleteSession deletes a session and everything stored for it.
// Errors: ErrInvalid, ErrNotFound.
func (e *Engine) DeleteSession(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := e.opts.Log.DeleteSession(ctx, id); err != nil && !errors.Is(err, errNeverStored) {
		return mapLogErr(id, err)
	}
	e.forget(id)
	e.changes.note(id)
	return nil
}

// StartRun begins a new run of the session (docs/design.md §5.5 POST
// /v1/sessions/{id}/runs): the failure circuit closes and its count resets.
// It returns the run_started event's seq. Errors: ErrInvalid, ErrNotFound.
func (e *Engine) StartRun(ctx context.Context, id string) (uint64, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	seq, err := e.opts.Log.Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindRunStarted, Data: json.RawMessage(`{"cause":"api"}`)}})
	if err != nil {
		return 0, mapLogErr(id, err)
	}
	s.lastSeq = seq
	s.failures = 0
	s.circuitOpen = false
	s.futilityRun = false
	return seq, nil
}

// Checkpoints returns the session's checkpoints, oldest first.
// Errors: ErrInvalid, ErrNotFound.
func (e *Engine) Checkpoints(ctx context.Context, id string) ([]checkpoint.Checkpoint, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	cps, err := e.opts.Log.ListCheckpoints(ctx, id)
	return cps, mapLogErr(id, err)
}

// Events calls fn with each event of the session from fromSeq on; with
// follow, it then waits for new events until ctx ends or fn returns an
// error. Errors: ErrInvalid, ErrNotFound, fn's, ctx's.
func (e *Engine) Events(ctx context.Context, id string, fromSeq uint64, follow bool, fn func(checkpoint.Event) error) error {
	if err := validID(id); err != nil {
		return err
	}
	if fromSeq == 0 {
		fromSeq = 1
	}
	for {
		next := fromSeq
		err := e.opts.Log.Range(ctx, id, fromSeq, func(ev checkpoint.Event) error {
			next = ev.Seq + 1
			return fn(ev)
		})
		if err != nil {
			return mapLogErr(id, err)
		}
		if !follow {
			return nil
		}
		if _, err := e.opts.Log.Wait(ctx, id, next-1); err != nil {
			return mapLogErr(id, err)
		}
		fromSeq = next
	}
}

// DeleteSessionFiles deletes session id as DeleteSession does, and then
// its directory of offloaded results and recall files (the session's
// expiry, docs/operating.md "Limits"). Errors: DeleteSession's; a
// directory that cannot be removed is logged.
func (e *Engine) DeleteSessionFiles(ctx context.Context, id string) error {
	cfg := e.Config()
	dir := cfg.Offload.Dir
	if dir == "" {
		dir = e.opts.OffloadDir
	}
	if dir == "" && cfg.Storage.DataDir != "" {
		dir = filepath.Join(cfg.Storage.DataDir, "offload")
	}
	if err := e.DeleteSession(ctx, id); err != nil {
		return err
	}
	if dir == "" {
		return nil
	}
	sd, err := offload.New(cfg.Offload, dir, nil, e.log).SessionDir(id)
	if err == nil {
		if err := os.RemoveAll(sd); err != nil {
			e.log.Warn("files of a deleted session not removed", "session", id, "dir", sd, "err", err)
		}
	}
	return nil
}

// shownLimit is the window as Info shows it: 0 while unknown.
func (s *session) shownLimit() uint64 {
	if s.win.source == WindowUnknown {
		return 0
	}
	return s.limit
}

// shownThreshold is the threshold as Info shows it: 0 while the window is
// unknown (automatic compaction waits for it).
func (s *session) shownThreshold() uint64 {
	if s.win.source == WindowUnknown {
		return 0
	}
	return s.threshold
}
