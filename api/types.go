package api

import (
	"encoding/json"
	"time"
)

// CreateSessionRequest is the body of RouteCreateSession.
type CreateSessionRequest struct {
	// ID is the new session's id: 1 to 128 bytes of [A-Za-z0-9._-], not
	// "." or "..". Empty means the server generates one (returned in
	// Session.ID).
	ID string `json:"id,omitempty"`
	// Model is the model id the session talks to, looked up in the model
	// catalog (docs/design.md §3 [models]). Required.
	Model string `json:"model"`
	// ContextLimit is the session's context window in tokens. 0 means the
	// catalog's; required when the catalog lacks Model (creation fails with
	// Invalid, field "context_limit", rather than guessing).
	ContextLimit uint64 `json:"context_limit,omitempty"`
	// System is the system prompt.
	System string `json:"system,omitempty"`
	// Tools are the tool definitions offered to the model.
	Tools []ToolDef `json:"tools,omitempty"`
	// Pinned is context kept right after the tool definitions and never
	// compacted (docs/design.md §4), as canonical blocks (text, image, json); it
	// is rendered as one user message. Text is [{"type":"text","text":…}].
	Pinned []Block `json:"pinned,omitempty"`
	// Config is a TOML overlay: the session's own layer on top of the
	// daemon's configuration (docs/design.md §3), decoded strictly, policy keys
	// only. A problem is Invalid with field the TOML key it names (e.g.
	// "summarizer.bindings", a key an overlay may not set), or "config"
	// when it names none, and a message naming line and column.
	Config string `json:"config,omitempty"`
	// Labels are free-form operator labels, returned in Session.Labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// PatchSessionRequest is the body of RoutePatchSession. A nil (absent or
// JSON null) field is left unchanged; an empty value clears ("tools": []
// removes every tool). A change of System or Tools is a recorded rewrite
// (docs/design.md §4).
type PatchSessionRequest struct {
	// System replaces the system prompt.
	System *string `json:"system,omitempty"`
	// Tools replaces the tool definitions.
	Tools *[]ToolDef `json:"tools,omitempty"`
	// Pinned replaces the pinned context.
	Pinned *[]Block `json:"pinned,omitempty"`
	// Model switches the model; the threshold follows its context window
	// unless ContextLimit is given (or the session has its own limit).
	Model *string `json:"model,omitempty"`
	// ContextLimit replaces the session's context window, in tokens;
	// 0 means the catalog's for the (new) model.
	ContextLimit *uint64 `json:"context_limit,omitempty"`
}

// Token figure sources (Tokens.Source).
const (
	// TokensReported: the figure is the provider's reported usage of the
	// last request (docs/design.md §2: ground truth), plus nothing since.
	TokensReported = "reported"
	// TokensEstimated: the figure includes ctxd's calibrated estimate of
	// messages that usage does not cover yet (or after a checkpoint).
	TokensEstimated = "estimated"
)

// Tokens is a size of the assembled context, in tokens, and where the
// figure comes from.
type Tokens struct {
	// Value is the number of tokens.
	Value uint64 `json:"value"`
	// Source is TokensReported or TokensEstimated.
	Source string `json:"source"`
}

// Circuit is the state of a session's failure circuit (docs/design.md §5.5).
type Circuit struct {
	// Open is true once automatic compaction stopped for the current run
	// (three consecutive failures). Manual and overflow compaction still
	// work.
	Open bool `json:"open"`
	// Failures is the number of consecutive failed (or stalled)
	// compactions in the current run.
	Failures int `json:"failures"`
}

// Compaction states (Session.Compaction).
const (
	CompactionIdle    = "idle"
	CompactionQueued  = "queued"
	CompactionRunning = "running"
)

// Trigger signals (docs/design.md §5.1).
const (
	SignalPostCheck = "post-check"
	SignalPreSend   = "pre-send"
)

// TriggerCheck is the outcome of the last automatic trigger check of a
// session: what ctxctl doctor shows as "why compaction did or did not fire".
type TriggerCheck struct {
	// Time is when the check ran, UTC.
	Time time.Time `json:"time"`
	// Signal is SignalPostCheck or SignalPreSend.
	Signal string `json:"signal"`
	// Tokens is the figure compared with Threshold.
	Tokens Tokens `json:"tokens"`
	// Threshold is the session's threshold at the time, in tokens.
	Threshold uint64 `json:"threshold"`
	// Fired says whether a compaction was queued (or waited for).
	Fired bool `json:"fired"`
	// Reason explains the outcome in one line, e.g. "below threshold",
	// "auto = false", "a tool round is open", "circuit open", "no new
	// group since the last checkpoint".
	Reason string `json:"reason"`
}

// RewriteFigures weighs a session's recorded rewrites, in ctxd's estimated
// tokens and in cost units of one uncached input token at the prompt
// cache's prices (write 1.25, read 0.1).
type RewriteFigures struct {
	// Passes and Compactions count the rewrites.
	Passes      int `json:"passes"`
	Compactions int `json:"compactions"`
	// RewrittenTokens is what the rewrites made the next requests write
	// to the cache again instead of reading it; SavedTokens what the
	// requests after each rewrite did not send, summed over them.
	RewrittenTokens uint64 `json:"rewritten_tokens"`
	SavedTokens     uint64 `json:"saved_tokens"`
	// Cost is RewrittenTokens × 1.15, Savings SavedTokens × 0.1, Net
	// Savings − Cost (positive once the rewrites have paid for themselves).
	Cost    float64 `json:"cost"`
	Savings float64 `json:"savings"`
	Net     float64 `json:"net"`
	// DeferredPasses counts the context-edit passes deferred (since the
	// daemon loaded the session) because their savings before the next
	// compaction would not pay for their rewrite; DeferredCost and
	// DeferredSavings are the newest one's, in Cost's and Savings' units.
	DeferredPasses  uint64  `json:"deferred_passes,omitempty"`
	DeferredCost    float64 `json:"deferred_cost,omitempty"`
	DeferredSavings float64 `json:"deferred_savings,omitempty"`
}

// Session describes one session: the body of RouteGetSession and of the
// responses of RouteCreateSession and RoutePatchSession.
type Session struct {
	// ID is the session's id.
	ID string `json:"id"`
	// Model is the model id.
	Model string `json:"model"`
	// ContextLimit is the context window in effect, in tokens; 0 while
	// unknown (a model nothing knows, before the provider names it).
	ContextLimit uint64 `json:"context_limit"`
	// WindowSource says where ContextLimit came from: "session" (its own
	// context_limit), "config" (an operator's [models."<id>"]), "catalog",
	// "wire" (the request: anthropic-beta context-1m-*), "learned" (the
	// provider's overflow error) or "unknown". Empty from an older daemon.
	WindowSource string `json:"window_source,omitempty"`
	// SettingsDiff lists what the model settings stored with the session
	// differ in from the daemon's current configuration (ctxctl doctor).
	SettingsDiff []string `json:"settings_diff,omitempty"`
	// PrepareMark is the token count at which a speculative summary is
	// prepared in the background (docs/config.md prepare_percent); 0 when
	// the session prepares none. IdleCompaction says whether the session
	// is compacted before its idle prompt cache lapses.
	PrepareMark    uint64 `json:"prepare_mark,omitempty"`
	IdleCompaction bool   `json:"idle_compaction,omitempty"`
	// Threshold is the token count at which automatic compaction fires
	// (docs/design.md §3 trigger, §5.1); 0 while the window is unknown.
	Threshold uint64 `json:"threshold"`
	// Auto is the session's context_compaction.auto in effect.
	Auto bool `json:"auto"`
	// Created is when the session was created, UTC.
	Created time.Time `json:"created"`
	// Updated is when the session last changed, UTC.
	Updated time.Time `json:"updated,omitzero"`
	// Messages is the number of messages in the event log (every original
	// message, compacted or not).
	Messages uint64 `json:"messages"`
	// LastSeq is the seq of the newest event; 0 for an empty log.
	LastSeq uint64 `json:"last_seq"`
	// Tokens is the current size of the assembled context.
	Tokens Tokens `json:"tokens"`
	// Circuit is the failure circuit's state.
	Circuit Circuit `json:"circuit"`
	// Compaction is CompactionIdle, CompactionQueued or CompactionRunning.
	Compaction string `json:"compaction"`
	// OpenToolCalls is the number of tool calls still waiting on their
	// result (an open tool round, docs/design.md §2).
	OpenToolCalls int `json:"open_tool_calls"`
	// Checkpoints is the number of checkpoints.
	Checkpoints uint64 `json:"checkpoints"`
	// LastCheckpoint is the newest checkpoint without its summary text,
	// nil when there is none.
	LastCheckpoint *Checkpoint `json:"last_checkpoint,omitempty"`
	// LastCheck is the last automatic trigger check, nil before the first.
	LastCheck *TriggerCheck `json:"last_check,omitempty"`
	// Shape is the compaction shape the session's next compaction will
	// use, "auto" resolved for its model: ShapeKeepTail, ShapeSimple or
	// ShapeServer (docs/design.md §3 [compaction].shape). Empty from a daemon
	// that does not report it.
	Shape string `json:"shape,omitempty"`
	// ServerShapeActive and ServerShapeWhy: with compaction.shape
	// "server", whether the provider compacts this session (a proxied
	// Anthropic Messages or OpenAI Responses session of a model with
	// server_compaction whose upstream accepted it) or why it falls back to
	// the summarizer bindings (docs/design.md §10). Empty for the other shapes.
	ServerShapeActive bool   `json:"server_shape_active,omitempty"`
	ServerShapeWhy    string `json:"server_shape_why,omitempty"`
	// ContextEditing is the context-editing mode in effect for the
	// session's model: "off", "local" or "server" (docs/design.md §6, "auto"
	// resolved). Empty from a daemon that does not report it.
	ContextEditing string `json:"context_editing,omitempty"`
	// ContextEditingWhy says in one line why that mode is in effect (the
	// configured mode and the model's server_context_editing).
	ContextEditingWhy string `json:"context_editing_why,omitempty"`
	// SystemDigest and ToolsDigest identify the system prompt and the tool
	// set: 24 hex digits, the first 12 bytes of the SHA-256 of the prompt's
	// bytes or of the tools' compact JSON; a change is a recorded rewrite
	// (docs/design.md §4). Empty when unset.
	SystemDigest string `json:"system_digest,omitempty"`
	ToolsDigest  string `json:"tools_digest,omitempty"`
	// Labels are the labels given at creation.
	Labels map[string]string `json:"labels,omitempty"`
	// LastError is the newest compaction failure of the current run, for
	// `ctxctl doctor`; empty when there is none.
	LastError string `json:"last_error,omitempty"`
	// Warnings, in the creation response only, say what in the session's
	// settings works against it, e.g. a trigger whose threshold is 0 for
	// the session's window (docs/design.md §5.2 futility). Nothing was refused.
	Warnings []string `json:"warnings,omitempty"`
	// Mode is the session's own proxy mode (ModeEnforce, ModeObserve; empty:
	// the daemon's [proxy] mode) and Ledger its savings ledger in brief,
	// nil before its first entry (docs/design.md §10).
	Mode   string         `json:"mode,omitempty"`
	Ledger *LedgerSummary `json:"ledger,omitempty"`
	// Rewrites weighs the session's context-edit passes and compactions:
	// what they made the following requests write to the prompt cache
	// again against what those requests no longer sent (docs/design.md
	// §4); nil before the first.
	Rewrites *RewriteFigures `json:"rewrites,omitempty"`
}

// ListSessionsResponse is the body of RouteListSessions.
type ListSessionsResponse struct {
	// Sessions are one page of sessions, in the store's key order (id +
	// "/" bytewise). A session not in memory is described from its
	// listing row (its figures as of its last change) and has no
	// last_check or last_checkpoint.
	Sessions []Session `json:"sessions"`
	// Next is the QueryAfter of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

// RunRequest is the body of RouteStartRun. It has no fields yet; an empty
// body is accepted too.
type RunRequest struct{}

// RunResponse is the body of the RouteStartRun response.
type RunResponse struct {
	// Seq is the seq of the run_started event.
	Seq uint64 `json:"seq"`
	// Circuit is the circuit after the start of the run: closed, no
	// failures (docs/design.md §5.5: the count is per run).
	Circuit Circuit `json:"circuit"`
}

// AppendMessagesRequest is the body of RouteAppendMessages. The messages
// are validated together (roles, tool-call pairing, block shapes); any
// problem is Invalid with Field naming it ("messages[2].tool_call_id") and
// nothing is stored.
type AppendMessagesRequest struct {
	Messages []Message `json:"messages"`
	// IdempotencyKey, when set, is sent as the Idempotency-Key header, not
	// in the body (Client.AppendMessages).
	IdempotencyKey string `json:"-"`
}

// AppendMessagesResponse is the body of the RouteAppendMessages response.
type AppendMessagesResponse struct {
	// Messages are the messages stored by this request, in seq order, as
	// stored: Seq and Tokens set, oversized tool results replaced by their
	// offload stubs (docs/design.md §6), and any error results ctxd appended
	// first to close an abandoned round (docs/design.md §2).
	Messages []Message `json:"messages"`
	// FirstSeq and LastSeq bound every event this request wrote, messages
	// and others (offload, abandoned_round, run_started…).
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Tokens is the size of the assembled context after the append.
	Tokens Tokens `json:"tokens"`
	// Threshold is the session's threshold, in tokens.
	Threshold uint64 `json:"threshold"`
	// CompactionQueued is true when the post-check queued a background
	// compaction (docs/design.md §5.1); the append did not wait for it.
	CompactionQueued bool `json:"compaction_queued"`
	// Events are the events other than messages this request wrote, in seq
	// order (offload, abandoned_round, run_started, diagnostic…).
	Events []Event `json:"events,omitempty"`
	// Replayed is true when the request's Idempotency-Key was used by an
	// earlier append of the session: nothing was stored now, and the
	// messages, seqs and events are that append's (Tokens and Threshold
	// are the session's now).
	Replayed bool `json:"replayed,omitempty"`
}

// Headers of an idempotent append (docs/api.md "Retrying an append").
const (
	// HeaderIdempotencyKey names one append: 1 to 255 printable ASCII
	// characters, new for each append, the same on each retry of it.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed is "true" on the answer to a retry whose
	// key an earlier append used (AppendMessagesResponse.Replayed).
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// ContextResponse is the RouteContext body for FormatCanonical: the
// assembled context of docs/design.md §4, ready to send. Messages is complete:
// the pinned context and the checkpoint summary appear in it as user
// messages with Seq 0, in the order of §4.
type ContextResponse struct {
	// System is the system prompt.
	System string `json:"system,omitempty"`
	// Tools are the tool definitions.
	Tools []ToolDef `json:"tools,omitempty"`
	// Messages are the messages to send, offload stubs and context-edit
	// stubs applied.
	Messages []Message `json:"messages"`
	// Tokens is the size of this context.
	Tokens Tokens `json:"tokens"`
	// Threshold is the session's threshold, in tokens.
	Threshold uint64 `json:"threshold"`
	// ContextLimit is the session's context window, in tokens.
	ContextLimit uint64 `json:"context_limit"`
	// CheckpointSeq is the seq of the checkpoint this context starts from,
	// 0 for none.
	CheckpointSeq uint64 `json:"checkpoint_seq"`
	// LastSeq is the newest event seq this context reflects.
	LastSeq uint64 `json:"last_seq"`
	// Diagnostic is set when a pre-send compaction was needed and failed:
	// the context is the uncompacted one (docs/design.md §5.1).
	Diagnostic *Diagnostic `json:"diagnostic,omitempty"`
}

// Diagnostic is something an operator or agent should see: the Data of an
// EventDiagnostic event and ContextResponse.Diagnostic.
type Diagnostic struct {
	// Level is DiagLevelInfo, DiagLevelWarn or DiagLevelError.
	Level string `json:"level"`
	// Code is a stable machine-readable tag: one of the Diag* codes below,
	// e.g. DiagCompactionFailed, DiagCircuitOpen, DiagStall.
	Code string `json:"code"`
	// Message is one human-readable line.
	Message string `json:"message"`
}

// Levels of a Diagnostic, the same in a context response and in a
// diagnostic event. Logs written before this vocabulary was one may hold
// diagnostic events with level "warning": read it as DiagLevelWarn.
const (
	// DiagLevelInfo: an answer worth seeing, not a failure (nothing to
	// compact, a provider's count observed, a loop folded).
	DiagLevelInfo = "info"
	// DiagLevelWarn: something did not go as configured (a compaction
	// failed or stalled, a fallback, a binding missing).
	DiagLevelWarn = "warn"
	// DiagLevelError: the session cannot be served as configured.
	DiagLevelError = "error"
)

// Codes of a Diagnostic (Diagnostic.Code). The first group is the code of
// a context response's diagnostic (ContextResponse.Diagnostic, the
// proxy's Ctxd-Diagnostic); the second the code of diagnostic events
// (EventDiagnostic). DiagFutile and DiagNothingToCompact are both.
const (
	// DiagFutile: the fixed prefix alone reaches the threshold; a
	// compaction cannot bring the context under it.
	DiagFutile = "futile"
	// DiagNothingToCompact: over the threshold, but no message a summary
	// could replace (level info: an answer, not a failure).
	DiagNothingToCompact = "nothing_to_compact"
	// DiagCircuitOpen: automatic compaction stopped after consecutive
	// failures in this run.
	DiagCircuitOpen = "circuit_open"
	// DiagNotCompacted: over the threshold with no pre-send compaction for
	// another reason (shape server, an open tool round, auto off, a
	// staged request the upstream has not accepted yet).
	DiagNotCompacted = "not_compacted"
	// DiagCompactionQueued: the pre-send compaction waits for a worker;
	// the context is served uncompacted.
	DiagCompactionQueued = "compaction_queued"
	// DiagSummaryPreparing: over the threshold while the session's
	// summary is made in the background — the speculative one, or the
	// compaction the check queued when none was ready (level info): the
	// context fits the window and is served uncompacted; the summary is
	// installed when it is ready.
	DiagSummaryPreparing = "summary_preparing"
	// DiagCompactionFailed: the pre-send compaction failed.
	DiagCompactionFailed = "compaction_failed"
	// DiagOverWindow: the context exceeds the context window.
	DiagOverWindow = "over_window"

	// DiagStall: a compaction wrote its checkpoint but left the context at
	// or above the threshold (the checkpoint's Stalled).
	DiagStall = "stall"
	// DiagFallback: the session's bindings failed and the extractive
	// fallback wrote the summary.
	DiagFallback = "fallback"
	// DiagBindingMissing: the session's binding is no longer configured;
	// the event names it in "binding".
	DiagBindingMissing = "binding_missing"
	// DiagLoopFolded: a compaction folded a thinking tool loop (level info).
	DiagLoopFolded = "loop_folded"
	// DiagOverflowObserved: a provider's context-length refusal counted the
	// request (level info; "provider_count", "provider_limit").
	DiagOverflowObserved = "overflow_observed"
	// DiagServerShapeFallback: the provider refused its server-side
	// compaction; the session falls back to ctxd's own.
	DiagServerShapeFallback = "server_shape_fallback"
)

// Compaction reasons (CompactRequest.Reason, Checkpoint.Reason).
const (
	// ReasonManual: an operator or agent asked (ctxctl compact). Works with
	// auto = false and with the circuit open.
	ReasonManual = "manual"
	// ReasonOverflow: the provider rejected the request as too long;
	// compacts now, with auto = false or the circuit open (docs/design.md §5.1).
	ReasonOverflow = "overflow"
	// ReasonAuto: a post-check or pre-send signal (never sent by clients).
	ReasonAuto = "auto"
)

// CompactRequest is the body of RouteCompact.
type CompactRequest struct {
	// Reason is ReasonManual (default when empty) or ReasonOverflow.
	Reason string `json:"reason,omitempty"`
	// Wait makes the request return once the compaction finished (200)
	// instead of once it is queued (202). The wait is bounded by the
	// summarizer timeouts (docs/design.md §5.4) and by the caller's context.
	Wait bool `json:"wait,omitempty"`
}

// Compaction outcomes (CompactResponse.Status).
const (
	// CompactDone: the compaction finished; Checkpoint is set (it may be
	// Stalled, docs/design.md §5.5).
	CompactDone = "compacted"
	// CompactQueued: the compaction is queued or running (joined, if one
	// was already under way, docs/design.md §8a); watch the events.
	CompactQueued = "queued"
	// CompactNothing: a compaction would replace nothing (Reason says
	// why); nothing was done, and it is not a failure (docs/design.md §5.2).
	CompactNothing = "nothing_to_compact"
)

// CompactResponse is the body of the RouteCompact response.
type CompactResponse struct {
	// Status is CompactDone, CompactQueued or CompactNothing.
	Status string `json:"status"`
	// Checkpoint is the new checkpoint, with its summary, when Status is
	// CompactDone.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Reason says why, when Status is CompactNothing: e.g. "the session has
	// no messages yet", "no message since the last checkpoint".
	Reason string `json:"reason,omitempty"`
}

// Compaction shapes (Checkpoint.Shape; docs/design.md §3 [compaction].shape).
const (
	ShapeKeepTail = "keep-tail"
	ShapeSimple   = "simple"
	ShapeServer   = "server"
)

// Checkpoint is one compaction's result (docs/design.md §5.6). The assembled
// context after it is Summary, the messages from FirstRetainedSeq to
// SnapshotSeq, then every message after SnapshotSeq.
type Checkpoint struct {
	// Seq is the seq of the checkpoint's event.
	Seq uint64 `json:"seq"`
	// Time is when it was committed, UTC.
	Time time.Time `json:"time"`
	// Summary is the summary text; empty where a listing leaves it out
	// (Session.LastCheckpoint, checkpoint events). SummaryBytes is always
	// set.
	Summary string `json:"summary,omitempty"`
	// SummaryBytes is the summary's length in bytes.
	SummaryBytes uint64 `json:"summary_bytes"`
	// Stalled marks a checkpoint after which the context was still at or
	// above the threshold; it counts as a failure (docs/design.md §5.5).
	Stalled bool `json:"stalled"`
	// SnapshotSeq is the last seq the summarized snapshot covered.
	SnapshotSeq uint64 `json:"snapshot_seq"`
	// FirstRetainedSeq is the first retained message's seq; 0 when nothing
	// is retained (docs/design.md §5.2).
	FirstRetainedSeq uint64 `json:"first_retained_seq"`
	// SummarizedMessages is how many messages the summary replaces.
	SummarizedMessages uint64 `json:"summarized_messages"`
	// Binding is the name of the summarizer binding that produced it.
	Binding string `json:"binding"`
	// PrunedRetry says whether the pruned retry produced it (docs/design.md
	// §5.5).
	PrunedRetry bool `json:"pruned_retry"`
	// TokensBefore and TokensAfter are the assembled context's size in
	// tokens before and after the compaction.
	TokensBefore uint64 `json:"tokens_before"`
	TokensAfter  uint64 `json:"tokens_after"`
	// Shape is ShapeKeepTail, ShapeSimple or ShapeServer.
	Shape string `json:"shape,omitempty"`
	// Reason is ReasonAuto, ReasonManual or ReasonOverflow.
	Reason string `json:"reason,omitempty"`
	// RequestSeq is the seq of the current request carried after the
	// summary, FirstRequestSeq that of the first request carried before it
	// (docs/design.md §5.2); 0 when none.
	RequestSeq      uint64 `json:"request_seq,omitempty"`
	FirstRequestSeq uint64 `json:"first_request_seq,omitempty"`
	// Fallback: the summary came from the implicit extractive fallback
	// binding after every configured binding failed (docs/design.md §5.5).
	Fallback bool `json:"fallback,omitempty"`
}

// CheckpointsResponse is the body of RouteCheckpoints.
type CheckpointsResponse struct {
	// Checkpoints are every checkpoint of the session, oldest first, with
	// their summaries.
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// SearchHit is one matching line of RouteSearch.
type SearchHit struct {
	// Seq is the message's seq (for a summary, the checkpoint's; for an
	// offloaded result, its tool message's): read it with
	// RouteReadMessages.
	Seq uint64 `json:"seq"`
	// Source is SearchMessage, SearchSummary or SearchOffloaded.
	Source string `json:"source"`
	// Role ("user", "assistant", "tool result", …), Tool and ToolCallID
	// describe the message; empty for a summary.
	Role       string `json:"role,omitempty"`
	Tool       string `json:"tool,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Artifact is the "artifact://<id>" URI of an offloaded result's whole
	// text (RouteArtifact).
	Artifact string `json:"artifact,omitempty"`
	// Line is the line's number, from 1, in the message as
	// RouteReadMessages renders it, in the summary, or in the artifact.
	Line int `json:"line"`
	// Text is the line, cut to 300 characters around the match.
	Text string `json:"text"`
}

// Sources of a SearchHit.
const (
	SearchMessage   = "message"
	SearchSummary   = "summary"
	SearchOffloaded = "offloaded"
)

// SearchResponse is the body of RouteSearch.
type SearchResponse struct {
	// Hits are the page's hits in seq order.
	Hits []SearchHit `json:"hits"`
	// Total is the number of matching lines in the session.
	Total int `json:"total"`
	// Next is the QueryOffset of the following page, 0 on the last.
	Next int `json:"next,omitempty"`
	// WorkingDir is the working directory the session's agent stated (in
	// its system prompt or first messages), "" when none.
	WorkingDir string `json:"working_dir,omitempty"`
}

// ReadMessagesRequest is the query of RouteReadMessages; zero fields take
// their defaults.
type ReadMessagesRequest struct {
	From, To uint64
	Offset   int
	MaxChars int
}

// MessagesPage is the body of RouteReadMessages.
type MessagesPage struct {
	// From and To are the range read (To resolved to the newest message).
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
	// Offset is the character offset of Text in the range's rendering;
	// Next the QueryOffset of the following page, 0 on the last.
	Offset int `json:"offset"`
	Next   int `json:"next,omitempty"`
	// Text is the messages, each opened by a line "=== seq N · role".
	Text string `json:"text"`
	// WorkingDir is as in SearchResponse.
	WorkingDir string `json:"working_dir,omitempty"`
}

// EventKind is the type of an event of a session's log. The values are
// those of the log itself (package checkpoint), so a stream resumed from a
// seq is exactly the log.
type EventKind string

// Event kinds. Data shapes are those written by the engine; the ones named
// here are stable.
const (
	// EventMessage: a message was appended; Message is set.
	EventMessage EventKind = "message"
	// EventUsage: usage reported apart from a message.
	EventUsage EventKind = "usage"
	// EventCheckpoint: a compaction finished and its checkpoint was
	// committed. Data is a Checkpoint without its summary; Stalled marks
	// a stall (docs/design.md §5.5).
	EventCheckpoint EventKind = "checkpoint"
	// EventCompactionStarted: a compaction began, e.g. {"reason",
	// "snapshot_seq"}.
	EventCompactionStarted EventKind = "compaction_started"
	// EventCompactionFailed: a compaction failed on every binding, e.g.
	// {"reason", "errors": [{"binding", "class", "message"}],
	// "consecutive"}.
	EventCompactionFailed EventKind = "compaction_failed"
	// EventCircuitOpen: automatic compaction stopped for the rest of the
	// run (docs/design.md §5.5), e.g. {"failures": 3}.
	EventCircuitOpen EventKind = "circuit_open"
	// EventContextEdit: a context-editing pass (docs/design.md §6), e.g.
	// {"elided_count", "chars_saved", …}.
	EventContextEdit EventKind = "context_edit"
	// EventOffload: a tool result was offloaded (docs/design.md §6), e.g.
	// {"tool_call_id", "artifact", "path", "bytes", "lines", "chars"}.
	EventOffload EventKind = "offload"
	// EventOffloadFailed: a tool result over the offload limit was kept
	// whole because its file could not be written (a full or unwritable
	// offload directory), e.g. {"tool_call_id", "tool_name", "bytes",
	// "dir", "reason", "no_space"}. The append succeeded.
	EventOffloadFailed EventKind = "offload_failed"
	// EventDiagnostic: something to see; Data is a Diagnostic.
	EventDiagnostic EventKind = "diagnostic"
	// EventPrefixReset: a recorded rewrite stopped the replay of thinking
	// it invalidated (docs/design.md §4), e.g. {"cause", "withheld_before"}.
	EventPrefixReset EventKind = "prefix_reset"
	// EventAbandonedRound: error results were appended for open tool calls
	// when a new user prompt arrived (docs/design.md §2), e.g.
	// {"tool_call_ids": [...]}.
	EventAbandonedRound EventKind = "abandoned_round"
	// EventRunStarted: a new run began (docs/design.md §5.5), e.g. {"cause":
	// "user_prompt" | "api" | "restart"}.
	EventRunStarted EventKind = "run_started"
	// EventSessionUpdated: system prompt, tools, pinned context or model
	// changed.
	EventSessionUpdated EventKind = "session_updated"
	// EventImported: one record of an imported transcript, verbatim.
	EventImported EventKind = "imported"
)

// Event is one entry of a session's event log, as streamed by RouteEvents
// and returned in AppendMessagesResponse.Events.
type Event struct {
	// Seq is the event's position in its session, from 1.
	Seq uint64 `json:"seq"`
	// Kind says what happened.
	Kind EventKind `json:"kind"`
	// Time is when it happened, UTC.
	Time time.Time `json:"time"`
	// Message is set on EventMessage only.
	Message *Message `json:"message,omitempty"`
	// Data is the kind's payload: one JSON value, or empty.
	Data json.RawMessage `json:"data,omitempty"`
}

// Queue describes the compaction queue (docs/design.md §3 [workers]).
type Queue struct {
	// Depth is the number of compactions waiting.
	Depth int `json:"depth"`
	// Capacity is the bound; when Depth reaches it, further compactions are
	// refused with Unavailable. 0 on a fleet node: the shared queue has no
	// bound of its own (Storage.NATS.Jobs describes it).
	Capacity int `json:"capacity"`
}

// Workers describes the compaction worker pool.
type Workers struct {
	// Size is the number of workers.
	Size int `json:"size"`
	// Busy is the number running a compaction now.
	Busy int `json:"busy"`
}

// Status is the body of RouteStatus.
type Status struct {
	// Version is the daemon's Version.
	Version string `json:"version"`
	// Started is when the daemon started, UTC.
	Started time.Time `json:"started"`
	// UptimeSeconds is the time since Started, in seconds.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Sessions is the number of sessions stored; -1 when the storage
	// backend cannot be reached (Storage says which and why).
	Sessions int `json:"sessions"`
	// Windows counts the sessions in memory by where their context window
	// came from (Session.WindowSource: "catalog", "config", "wire",
	// "learned", "session", "unknown"); empty from an older daemon.
	Windows map[string]int `json:"windows,omitempty"`
	// Queue is the compaction queue.
	Queue Queue `json:"queue"`
	// Workers is the compaction worker pool.
	Workers Workers `json:"workers"`
	// Disk is the free space of each guarded directory ("data", then
	// "offload"); empty from a daemon without the guard.
	Disk []Disk `json:"disk,omitempty"`
	// Proxy is the provider proxy's listener (docs/design.md §10); nil when the
	// daemon runs none.
	Proxy *ProxyStatus `json:"proxy,omitempty"`
	// Storage is where sessions are kept (docs/design.md §8, §9); nil from a
	// daemon that does not report it.
	Storage *StorageStatus `json:"storage,omitempty"`
}

// The storage backends of StorageStatus.Backend (`[storage] backend`).
const (
	StorageBadger = "badger"
	StorageNATS   = "nats"
)

// StorageStatus is the daemon's storage backend and, for a fleet node,
// its connection to the NATS cluster. It never carries credentials:
// server URLs have no userinfo, tokens and credentials files are not
// reported.
type StorageStatus struct {
	// Backend is StorageBadger or StorageNATS.
	Backend string `json:"backend"`
	// Dir is the badger store's directory (badger only).
	Dir string `json:"dir,omitempty"`
	// NATS is the cluster connection (nats only).
	NATS *NATSStatus `json:"nats,omitempty"`
}

// NATSStatus is a fleet node's connection to its NATS JetStream cluster
// and the names of ctxd's streams and buckets there (docs/design.md §9).
type NATSStatus struct {
	// Servers are the configured client URLs, userinfo removed.
	Servers []string `json:"servers"`
	// State is the connection's state: "connected", "reconnecting",
	// "connecting", "disconnected" or "closed". Anything but "connected"
	// means requests are refused with 503 unavailable.
	State string `json:"state"`
	// ConnectedServer is the server this node is connected to; "" while
	// not connected.
	ConnectedServer string `json:"connected_server,omitempty"`
	// DownSince is when the connection was lost, UTC; absent while
	// connected.
	DownSince time.Time `json:"down_since,omitzero"`
	// LastError is why the connection was lost; "" while connected.
	LastError string `json:"last_error,omitempty"`
	// Prefix names the streams and buckets; Replicas is their
	// replication factor.
	Prefix   string `json:"prefix"`
	Replicas int    `json:"replicas"`
	// EventsStream and JobsStream are the event-log and compaction-job
	// streams; MetaBucket the key-value bucket of session metadata;
	// ArtifactsBucket the object store of artifacts.
	EventsStream    string `json:"events_stream"`
	JobsStream      string `json:"jobs_stream"`
	MetaBucket      string `json:"meta_bucket"`
	ArtifactsBucket string `json:"artifacts_bucket"`
	// Jobs is the fleet's compaction queue, the same on every node; nil
	// when the cluster could not be asked (an outage).
	Jobs *FleetJobs `json:"jobs,omitempty"`
}

// FleetJobs is the fleet's shared compaction queue as the cluster has it
// (docs/design.md §9; docs/operating.md "A fleet").
type FleetJobs struct {
	// Queued is the jobs no node has taken yet.
	Queued uint64 `json:"queued"`
	// Held is the jobs taken and not finished: running on a live node, or
	// held by a node that died until AckWaitMS passes without its progress
	// signal, when the job goes to another node.
	Held int `json:"held"`
	// Redelivered is the held jobs given to a node more than once (their
	// first node died or handed them back).
	Redelivered int `json:"redelivered"`
	// FreeWorkers is the workers of live nodes waiting for a job.
	FreeWorkers int `json:"free_workers"`
	// AckWaitMS is storage.nats.ack_wait_ms as the cluster applies it.
	AckWaitMS int64 `json:"ack_wait_ms"`
}

// Disk is the free space of one directory the daemon writes to, against
// the reserve it keeps (storage.min_free_bytes, docs/operating.md "Disk
// full").
type Disk struct {
	// Name is "data" (the badger store) or "offload".
	Name string `json:"name"`
	// Dir is the directory.
	Dir string `json:"dir"`
	// FreeBytes is the space available there, in bytes.
	FreeBytes uint64 `json:"free_bytes"`
	// ReserveBytes is the space the daemon keeps free, in bytes.
	ReserveBytes uint64 `json:"reserve_bytes"`
	// Low is true when FreeBytes < ReserveBytes: on "data", appends, new
	// sessions and compactions are refused with InsufficientStorage; on
	// "offload", oversized tool results are kept whole (offload_failed).
	Low bool `json:"low"`
	// Error is set when the free space could not be read.
	Error string `json:"error,omitempty"`
}

// ProxyCredential is one client credential's stored usage.
type ProxyCredential struct {
	// Credential is the credential's hash; Sessions its proxied sessions;
	// Bytes the message bytes they recorded.
	Credential string `json:"credential"`
	Sessions   int    `json:"sessions"`
	Bytes      uint64 `json:"bytes"`
}

// ProxyUpstream is one upstream of the provider proxy (docs/design.md §10).
type ProxyUpstream struct {
	// Name is the [proxy.upstreams.<name>] key: "anthropic" or "openai".
	Name string `json:"name"`
	// BaseURL is its base URL; userinfo (a user or password in the URL)
	// is never shown.
	BaseURL string `json:"base_url"`
	// Endpoints are the managed paths it serves, e.g. "/v1/messages".
	Endpoints []string `json:"endpoints"`
}

// ProxyStatus describes the provider proxy (docs/design.md §10).
type ProxyStatus struct {
	// Enabled is proxy.enabled.
	Enabled bool `json:"enabled"`
	// Listen is the address it serves, e.g. "127.0.0.1:7420"; "" when it
	// is not listening.
	Listen string `json:"listen,omitempty"`
	// Upstream is the Anthropic upstream's base URL (as in Upstreams).
	Upstream string `json:"upstream,omitempty"`
	// Upstreams is every configured upstream ([proxy.upstreams.<name>]):
	// its name, base URL without userinfo, and the endpoints it serves.
	Upstreams []ProxyUpstream `json:"upstreams,omitempty"`
	// Error says why an enabled proxy is not listening.
	Error string `json:"error,omitempty"`
	// Mode is proxy.mode in effect: "enforce" (ctxd's context is sent) or
	// "observe" (every request goes as the client sent it; the ledger
	// projects the savings). A session's own mode (ctxctl session mode)
	// overrides it for that session.
	Mode string `json:"mode,omitempty"`
	// Requests counts every request served; Managed those recorded and
	// assembled by ctxd; PassedThrough those forwarded untouched;
	// Overflows the context-length refusals recovered; Branches the
	// client rewrites recorded.
	Requests      uint64 `json:"requests"`
	Managed       uint64 `json:"managed"`
	PassedThrough uint64 `json:"passed_through"`
	Overflows     uint64 `json:"overflows"`
	Branches      uint64 `json:"branches"`
	// Violations counts assembled contexts that broke docs/design.md §4a and
	// were not sent (a bug; the client's own request went instead).
	Violations uint64 `json:"violations"`
	// ClientRuleBreaks counts client requests that themselves broke
	// docs/design.md §4a: forwarded as sent for the provider to judge, not
	// recorded, not counted in Violations.
	ClientRuleBreaks uint64 `json:"client_rule_breaks"`
	// Credentials is what each client credential keeps stored
	// ([proxy.quotas]), most bytes first: the credential's hash (12 hex
	// digits of its keyed fingerprint, the proxied sessions'
	// proxy.credential label), never the credential.
	Credentials []ProxyCredential `json:"credentials,omitempty"`
	// Conversations counts the conversations the proxy started a session
	// for; MaxBranches is the most sessions (branches) one conversation
	// has had: a client rewrite starts one, a client that only touches
	// what it resends does not.
	Conversations uint64 `json:"conversations"`
	MaxBranches   uint64 `json:"max_branches"`
	// DeclinedUpgrades counts the protocol upgrades (Codex's WebSocket on
	// GET /v1/responses) declined with 426 so that the client uses HTTP.
	DeclinedUpgrades uint64 `json:"declined_upgrades"`
}
