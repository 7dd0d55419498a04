// Package checkpoint owns each session's append-only event log and its
// checkpoints (docs/design.md §5.6, §8): what happened to a session, in order,
// durable before it is acknowledged, and enough of it to rebuild the
// session's state after a restart. It never decides when to compact.
//
// The engine uses the Log interface (docs/design.md §9: the store sits behind an
// interface so that a fleet can move to another engine); Store is the
// embedded badger implementation.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
)

// Errors of this package. Every error a Log returns wraps one of them (or is
// the caller's context error), with %w and a message naming the session and
// the offending value. Those the daemon API answers carry their api code
// (api.ErrorCoder); ErrCorrupt and ErrConflict carry none (api.Internal).
var (
	// ErrNotFound: the session (or checkpoint) does not exist.
	ErrNotFound error = api.NewCoded(api.NotFound, "not found")
	// ErrExists: CreateSession of a session that exists.
	ErrExists error = api.NewCoded(api.Conflict, "already exists")
	// ErrInvalid: bad input — a malformed session id, an event or
	// checkpoint that fails validation. Nothing was stored.
	ErrInvalid error = api.NewCoded(api.Invalid, "invalid").Answer(func(err error) *api.Error {
		return &api.Error{Code: api.Invalid, Message: strings.TrimPrefix(err.Error(), "invalid: ")}
	})
	// ErrTooLarge: one call's events do not fit in one transaction (see
	// Store.Append). Nothing was stored; split the events.
	ErrTooLarge error = api.NewCoded(api.TooLarge, "too large").Answer(func(err error) *api.Error {
		return &api.Error{Code: api.TooLarge, Message: store.TooLargeMessage + err.Error()}
	})
	// ErrClosed: the log was closed.
	ErrClosed error = api.NewCoded(api.Unavailable, "log closed").Answer(func(error) *api.Error {
		return &api.Error{Code: api.Unavailable, Message: store.ShuttingDown}
	})
	// ErrCorrupt: a stored record could not be decoded.
	ErrCorrupt = errors.New("corrupt record")
	// ErrConflict: an AppendAt whose expected last seq is no longer the
	// session's (another writer — another node sharing the log, docs/design.md
	// §9 — appended first), or a checkpoint of a snapshot already
	// checkpointed. Nothing was stored; reload the session and retry.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the storage backend cannot be reached (a fleet's
	// NATS servers are all down, docs/design.md §9); the error's text names the
	// backend and its servers. Nothing was done; try again once it is back.
	// The daemon answers 503 unavailable.
	ErrUnavailable error = api.NewCoded(api.Unavailable, "storage unavailable").Answer(func(err error) *api.Error {
		// The backend's own words ("storage: nats: no servers available
		// …"), not the time limit the request would otherwise run into.
		return &api.Error{Code: api.Unavailable, Message: cutAfter(err.Error(), "storage unavailable: ")}
	})
	// ErrUncertain: a write whose outcome is unknown — the backend did not
	// acknowledge it in time (a fleet's stream lost its leader mid-write,
	// docs/design.md §9) — so it may or may not have been stored. Retrying
	// with the same idempotency key is safe: the retry returns the first
	// answer if the write was stored. The daemon answers 504 timeout, saying
	// the write may have happened.
	ErrUncertain error = api.NewCoded(api.Timeout, "write outcome unknown").Answer(func(err error) *api.Error {
		// The storage's own words, and what the client can do about a
		// write that may have happened.
		return &api.Error{Code: api.Timeout, Message: "the write may have been stored: " + cutAfter(err.Error(), "write outcome unknown: ") +
			"; retry with the same Idempotency-Key header: if it was stored, the retry returns the first answer and stores nothing"}
	})
)

// cutAfter returns s after the first sep, or s when sep is not in it.
func cutAfter(s, sep string) string {
	if _, a, ok := strings.Cut(s, sep); ok {
		return a
	}
	return s
}

// Log is a store of sessions, each an append-only event log with
// checkpoints and a metadata record. Implementations are safe for concurrent
// use; writes of one session are serialized and assigned sequence numbers
// 1, 2, 3… with no gap. Nothing is ever rewritten or deleted except a whole
// session by DeleteSession.
type Log interface {
	// CreateSession creates session with meta (Created and Updated are set
	// by the log). Errors: ErrInvalid (session id), ErrExists.
	CreateSession(ctx context.Context, session string, meta Meta) (Meta, error)
	// GetMeta returns the session's metadata. Errors: ErrInvalid,
	// ErrNotFound.
	GetMeta(ctx context.Context, session string) (Meta, error)
	// PutMeta replaces the caller-owned fields of the session's metadata
	// (the log keeps Created, LatestCheckpoint and Checkpoints) and, in the
	// same transaction, appends events (may be none), for example a
	// session_updated event recording new digests. It returns the first
	// event's seq, 0 when events is empty. Errors: ErrInvalid, ErrNotFound,
	// ErrTooLarge.
	PutMeta(ctx context.Context, session string, meta Meta, events ...Event) (firstSeq uint64, err error)
	// Append appends events atomically and returns the seq assigned to the
	// first; the rest follow contiguously. It returns only once the events
	// are durable. Errors: ErrInvalid (any invalid event: nothing is
	// stored), ErrNotFound, ErrTooLarge, ErrClosed.
	Append(ctx context.Context, session string, events []Event) (firstSeq uint64, err error)
	// AppendAt is Append at an expected position: it stores events only if
	// the session's last seq is still after (0: no event yet), so two
	// writers sharing the log can never both write the same position
	// (docs/design.md §9). Errors: Append's, and ErrConflict when the last seq
	// differs (nothing is stored).
	AppendAt(ctx context.Context, session string, after uint64, events []Event) (firstSeq uint64, err error)
	// Range calls fn with each event of session whose seq ≥ fromSeq, in
	// order, until fn returns an error (returned as is) or the log ends.
	// Errors: ErrInvalid, ErrNotFound, ErrCorrupt, ctx's error.
	Range(ctx context.Context, session string, fromSeq uint64, fn func(Event) error) error
	// LastSeq returns the seq of the session's last event, 0 when it has
	// none. Errors: ErrInvalid, ErrNotFound.
	LastSeq(ctx context.Context, session string) (uint64, error)
	// Wait blocks until the session's last seq exceeds afterSeq and returns
	// it (at once when it already does): for following the log. Errors:
	// ErrInvalid, ErrNotFound (also when the session is deleted while
	// waiting), ErrClosed, ctx's error.
	Wait(ctx context.Context, session string, afterSeq uint64) (uint64, error)
	// PutCheckpoint stores cp in one transaction with its checkpoint event
	// and the metadata update (docs/design.md §5.6), and returns it with Seq,
	// Time and SummaryBytes set. Errors: ErrInvalid, ErrNotFound,
	// ErrTooLarge.
	PutCheckpoint(ctx context.Context, session string, cp Checkpoint) (Checkpoint, error)
	// Latest returns the session's newest checkpoint; false when it has
	// none. Errors: ErrInvalid, ErrNotFound, ErrCorrupt.
	Latest(ctx context.Context, session string) (Checkpoint, bool, error)
	// GetCheckpoint returns the checkpoint with seq. Errors: ErrInvalid,
	// ErrNotFound, ErrCorrupt.
	GetCheckpoint(ctx context.Context, session string, seq uint64) (Checkpoint, error)
	// ListCheckpoints returns the session's checkpoints, oldest first.
	// Errors: ErrInvalid, ErrNotFound, ErrCorrupt.
	ListCheckpoints(ctx context.Context, session string) ([]Checkpoint, error)
	// ListSessions returns the ids of all sessions, sorted bytewise.
	ListSessions(ctx context.Context) ([]string, error)
	// CountSessions returns the number of sessions without building their
	// list.
	CountSessions(ctx context.Context) (int, error)
	// ListPage returns at most limit sessions (limit ≥ 1) that follow the
	// session id after ("" starts from the first), in the order of
	// id + "/" bytewise (the store's key order: it differs from plain id
	// order only where one id is another followed by '-' or '.'), each
	// with its metadata, listing row and last seq; more reports whether
	// any session follows the page. The order is a stable cursor: a
	// session created or deleted between two pages never makes another
	// appear twice or go missing. Errors: ErrInvalid (after is not a valid
	// id, limit < 1), ctx's.
	ListPage(ctx context.Context, after string, limit int) (page []Listed, more bool, err error)
	// PutRow replaces the session's listing row (what a listing shows
	// without loading the session; the caller's bytes, at most
	// MaxRowBytes) and returns without waiting for the write: the row lands
	// in the next group commit, in PutRow order. A row written after
	// DeleteSession is a leftover and ignored. Errors: ErrInvalid,
	// ErrTooLarge, ErrClosed.
	PutRow(session string, row []byte) error
	// DeleteSession deletes the session with its events and checkpoints:
	// the only deletion there is. Errors: ErrInvalid, ErrNotFound.
	DeleteSession(ctx context.Context, session string) error
}

// Kind is the type of an event. The kinds are a closed set: an event of any
// other kind is rejected with ErrInvalid. Data is the kind-specific payload
// (any JSON value, stored byte for byte); its shape belongs to the package
// that writes the event and is suggested below.
type Kind string

// Event kinds.
const (
	// KindMessage: a message was appended (docs/design.md §2). Message is
	// required; Message.Seq is set to the event's seq.
	KindMessage Kind = "message"
	// KindUsage: usage reported apart from a message, e.g.
	// {"seq": <message seq>, "usage": history.Usage}.
	KindUsage Kind = "usage"
	// KindCheckpoint: a checkpoint was committed (docs/design.md §5.6). Written
	// only by PutCheckpoint, never by Append; Data is a CheckpointEvent.
	KindCheckpoint Kind = "checkpoint"
	// KindCompactionStarted: a compaction began, e.g. {"reason": "auto",
	// "snapshot_seq": N}; lets an event stream show it (docs/design.md §7).
	KindCompactionStarted Kind = "compaction_started"
	// KindCompactionFailed: a compaction failed on every binding, e.g.
	// {"reason", "errors": [{"binding", "class", "message"}],
	// "consecutive": N} (docs/design.md §5.5).
	KindCompactionFailed Kind = "compaction_failed"
	// KindCircuitOpen: automatic compaction stopped for the rest of the run
	// after consecutive failures (docs/design.md §5.5), e.g. {"failures": 3}.
	KindCircuitOpen Kind = "circuit_open"
	// KindContextEdit: a context-editing pass (docs/design.md §6), e.g.
	// {"elided": [tool_call ids], "withheld_thinking": [seqs],
	// "elided_count": N, "chars_saved": N}; replaying these rebuilds the
	// ledger after a restart.
	KindContextEdit Kind = "context_edit"
	// KindOffload: a tool result was offloaded (docs/design.md §6), e.g.
	// {"tool_call_id", "artifact": "artifact://…", "path", "bytes",
	// "lines", "chars"}.
	KindOffload Kind = "offload"
	// KindOffloadFailed: a tool result over max_chars was kept whole
	// because its offload could not be written (docs/design.md §6: a full or
	// unwritable offload directory), e.g. {"tool_call_id", "tool_name",
	// "bytes", "dir", "reason", "no_space"}.
	KindOffloadFailed Kind = "offload_failed"
	// KindDiagnostic: something an operator should see, e.g.
	// {"level", "code", "message"}.
	KindDiagnostic Kind = "diagnostic"
	// KindPrefixReset: a recorded rewrite stopped the replay of thinking it
	// invalidated (docs/design.md §4), e.g. {"cause": "context_edit" |
	// "compaction" | "system_prompt" | "tools", "withheld_before": seq}.
	KindPrefixReset Kind = "prefix_reset"
	// KindAbandonedRound: a new user prompt arrived while tool calls were
	// open; error results were appended for them (docs/design.md §2), e.g.
	// {"tool_call_ids": [...]}.
	KindAbandonedRound Kind = "abandoned_round"
	// KindRunStarted: a new run began (docs/design.md §5.5), explicitly or at a
	// user prompt, e.g. {"cause": "user_prompt" | "api" | "restart"}.
	KindRunStarted Kind = "run_started"
	// KindSessionUpdated: the system prompt, tool set, pinned context or
	// model changed, e.g. {"system_prompt_digest", "tools_digest",
	// "model"}; usually written with PutMeta in the same transaction.
	KindSessionUpdated Kind = "session_updated"
	// KindImported: one record of an imported transcript (transcript/),
	// kept verbatim in Data for provenance.
	KindImported Kind = "imported"
	// KindClientState: what a provider-proxy client has sent so far
	// (docs/design.md §10), written in the same append as the messages it
	// accounts for; Data belongs to the proxy (its shape is the proxy's).
	KindClientState Kind = "client_state"
	// KindLedger: an entry of the session's savings ledger (docs/design.md
	// §10): a proxied request's tokens, reported usage, modelled
	// counterfactual and cache-write causes, a summarizer call, or a
	// change of the session's proxy mode; Data is a ledger.Entry.
	KindLedger Kind = "ledger"
	// KindPrepared: a speculative summary was prepared in the background
	// (docs/design.md §5.1), installed when the trigger fires; Data is the
	// engine's (the summary, the checkpoint it extends and the message seq
	// it covers up to).
	KindPrepared Kind = "prepared"
)

var kinds = map[Kind]bool{
	KindMessage: true, KindUsage: true, KindCheckpoint: true,
	KindCompactionStarted: true, KindCompactionFailed: true,
	KindCircuitOpen: true, KindContextEdit: true, KindOffload: true, KindOffloadFailed: true,
	KindDiagnostic: true, KindPrefixReset: true, KindAbandonedRound: true,
	KindRunStarted: true, KindSessionUpdated: true, KindImported: true,
	KindClientState: true, KindLedger: true, KindPrepared: true,
}

// Kinds returns every valid Kind.
func Kinds() []Kind {
	return []Kind{
		KindMessage, KindUsage, KindCheckpoint, KindCompactionStarted,
		KindCompactionFailed, KindCircuitOpen, KindContextEdit, KindOffload, KindOffloadFailed,
		KindDiagnostic, KindPrefixReset, KindAbandonedRound, KindRunStarted,
		KindSessionUpdated, KindImported, KindClientState, KindLedger, KindPrepared,
	}
}

// Valid reports whether k is one of the kinds above.
func (k Kind) Valid() bool { return kinds[k] }

// Event is one entry of a session's log.
type Event struct {
	// Seq is the event's position in its session, from 1. Assigned by the
	// log: must be 0 when appending.
	Seq uint64 `json:"seq"`
	// Kind says what happened.
	Kind Kind `json:"kind"`
	// Time is when it happened, UTC. Zero on append means now.
	Time time.Time `json:"time"`
	// Message is the appended message of a KindMessage event, nil on every
	// other kind.
	Message *history.Message `json:"message,omitempty"`
	// Data is the kind-specific payload: empty, or one JSON value, stored
	// and returned byte for byte.
	Data json.RawMessage `json:"data,omitempty"`
	// Idempotency is set on the last event of an append made with an
	// idempotency key (docs/api.md "Retrying an append"), nil otherwise.
	Idempotency *Idempotency `json:"idempotency,omitempty"`
}

// MaxIdempotencyKey is the longest idempotency key, in bytes.
const MaxIdempotencyKey = 255

// Idempotency records an append made with an idempotency key, on the
// append's last event: a retry with the key finds it and answers with
// what the first append stored instead of storing it again.
type Idempotency struct {
	// Key is the client's key: 1 to MaxIdempotencyKey printable ASCII
	// bytes.
	Key string `json:"key"`
	// FirstSeq is the seq of the append's first event.
	FirstSeq uint64 `json:"first_seq"`
	// Digest identifies the request the key was first used with, so that
	// a key reused for other content is refused rather than answered
	// with the first append.
	Digest string `json:"digest"`
}

// ValidIdempotencyKey checks an idempotency key: 1 to MaxIdempotencyKey
// bytes from printable ASCII (0x21–0x7e). Errors wrap ErrInvalid.
func ValidIdempotencyKey(k string) error {
	if k == "" || len(k) > MaxIdempotencyKey {
		return fmt.Errorf("%w: idempotency key of %d bytes: must be 1 to %d", ErrInvalid, len(k), MaxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Errorf("%w: idempotency key: byte %d (%#x) is not printable ASCII", ErrInvalid, i, k[i])
		}
	}
	return nil
}

// Validate checks e as an event to append: a known kind other than
// checkpoint, a message exactly on message events (with a known role), Data
// empty or valid JSON, Seq 0. Errors wrap ErrInvalid.
func (e *Event) Validate() error {
	switch {
	case e.Kind == "":
		return fmt.Errorf("%w: event has no kind", ErrInvalid)
	case !e.Kind.Valid():
		return fmt.Errorf("%w: unknown event kind %q", ErrInvalid, e.Kind)
	case e.Kind == KindCheckpoint:
		return fmt.Errorf("%w: checkpoint events are written by PutCheckpoint only", ErrInvalid)
	case e.Seq != 0:
		return fmt.Errorf("%w: %s event has seq %d: seqs are assigned by the log", ErrInvalid, e.Kind, e.Seq)
	case e.Kind == KindMessage && e.Message == nil:
		return fmt.Errorf("%w: message event without a message", ErrInvalid)
	case e.Kind != KindMessage && e.Message != nil:
		return fmt.Errorf("%w: %s event carries a message", ErrInvalid, e.Kind)
	case len(e.Data) > 0 && !json.Valid(e.Data):
		return fmt.Errorf("%w: %s event data is not valid JSON", ErrInvalid, e.Kind)
	}
	if e.Idempotency != nil {
		if err := ValidIdempotencyKey(e.Idempotency.Key); err != nil {
			return err
		}
	}
	if m := e.Message; m != nil {
		switch m.Role {
		case history.RoleUser, history.RoleAssistant, history.RoleTool, history.RoleSystem:
		case "":
			return fmt.Errorf("%w: message has no role", ErrInvalid)
		default:
			return fmt.Errorf("%w: message role %q is not user, assistant, tool or system", ErrInvalid, m.Role)
		}
		if m.Role == history.RoleTool && m.ToolCallID == "" {
			return fmt.Errorf("%w: tool message without tool_call_id", ErrInvalid)
		}
	}
	return nil
}

// Meta is a session's metadata record (key s/<session>/meta), stored as one
// JSON document. Fields marked "log-owned" are maintained by the log and
// ignored by PutMeta; the rest belong to the engine.
type Meta struct {
	// Created is when the session was created, UTC (log-owned).
	Created time.Time `json:"created"`
	// Updated is when the metadata was last written, UTC (log-owned).
	Updated time.Time `json:"updated"`
	// Model is the model id the session talks to (docs/design.md §3 [models]).
	Model string `json:"model,omitempty"`
	// ContextLimit is the session's context window in tokens; 0 means the
	// model catalog's.
	ContextLimit uint64 `json:"context_limit,omitempty"`
	// SystemPrompt is the session's system prompt.
	SystemPrompt string `json:"system_prompt,omitempty"`
	// SystemPromptDigest is a digest of SystemPrompt, compared across
	// restarts to detect a change (docs/design.md §4).
	SystemPromptDigest string `json:"system_prompt_digest,omitempty"`
	// Tools is the session's tool definitions, as JSON.
	Tools json.RawMessage `json:"tools,omitempty"`
	// ToolsDigest is a digest of Tools (docs/design.md §4).
	ToolsDigest string `json:"tools_digest,omitempty"`
	// Overlay is the TOML configuration overlay sent at creation
	// (docs/design.md §3), verbatim.
	Overlay string `json:"overlay,omitempty"`
	// Labels are free-form operator labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Extra is engine state with no field of its own yet; any JSON value.
	Extra json.RawMessage `json:"extra,omitempty"`
	// LatestCheckpoint is the seq of the newest checkpoint, 0 for none
	// (log-owned).
	LatestCheckpoint uint64 `json:"latest_checkpoint,omitempty"`
	// Checkpoints is the number of checkpoints (log-owned).
	Checkpoints uint64 `json:"checkpoints,omitempty"`
}

func (m *Meta) validate() error {
	for name, raw := range map[string]json.RawMessage{"tools": m.Tools, "extra": m.Extra} {
		if len(raw) > 0 && !json.Valid(raw) {
			return fmt.Errorf("%w: meta %s is not valid JSON", ErrInvalid, name)
		}
	}
	return nil
}

// Checkpoint is one compaction's result (docs/design.md §5.6), stored at
// s/<session>/c/<seq> where seq is that of its checkpoint event. The
// assembled context after it is: Summary, the messages from
// FirstRetainedSeq to SnapshotSeq, then every message after SnapshotSeq.
type Checkpoint struct {
	// Seq is the seq of the checkpoint's event; assigned by PutCheckpoint.
	Seq uint64 `json:"seq"`
	// Time is when it was committed, UTC; zero on PutCheckpoint means now.
	Time time.Time `json:"time"`
	// Summary is the summary text; never empty.
	Summary string `json:"summary"`
	// SummaryBytes is len(Summary) in bytes; set by PutCheckpoint (a
	// different non-zero value is rejected).
	SummaryBytes uint64 `json:"summary_bytes"`
	// Stalled marks a checkpoint after which the context was still at or
	// above the threshold (docs/design.md §5.5).
	Stalled bool `json:"stalled,omitempty"`
	// SnapshotSeq is the last seq the summarized snapshot covered. Must
	// exist in the log and not precede the previous checkpoint's.
	SnapshotSeq uint64 `json:"snapshot_seq"`
	// FirstRetainedSeq is the first retained message's seq, ≤ SnapshotSeq;
	// 0 when nothing is retained (docs/design.md §5.2).
	FirstRetainedSeq uint64 `json:"first_retained_seq,omitempty"`
	// SummarizedMessages is how many messages the summary replaces, for
	// the "summary of N earlier messages" line (docs/design.md §4).
	SummarizedMessages uint64 `json:"summarized_messages,omitempty"`
	// Binding is the name of the summarizer binding that produced it.
	Binding string `json:"binding"`
	// PrunedRetry says whether the pruned retry produced it (docs/design.md §5.5).
	PrunedRetry bool `json:"pruned_retry,omitempty"`
	// TokensBefore and TokensAfter are the assembled context's size in
	// tokens before and after the compaction.
	TokensBefore uint64 `json:"tokens_before"`
	TokensAfter  uint64 `json:"tokens_after"`
	// Shape is the compaction shape used: "keep-tail", "simple" or
	// "server" (docs/design.md §3).
	Shape string `json:"shape,omitempty"`
	// Reason is why it ran: "auto", "manual" or "overflow".
	Reason string `json:"reason,omitempty"`
	// Request is the current request — the user prompt that opened the
	// run being compacted — carried after the summary when the summary
	// covers it (docs/design.md §5.2); nil when it is retained or there is none.
	Request *Carried `json:"request,omitempty"`
	// FirstRequest is the session's first user request, carried as pinned
	// context before the summary (docs/design.md §5.2 keep_first_request); nil
	// when it is off, retained, or the current request itself.
	FirstRequest *Carried `json:"first_request,omitempty"`
	// Fallback says the summary came from the implicit extractive fallback
	// binding after every configured binding failed (docs/design.md §5.5).
	Fallback bool `json:"fallback,omitempty"`
}

// Carried is a user message a checkpoint keeps in the context outside the
// summary (docs/design.md §5.2): the message of the log with seq Seq, sent as it
// was stored when Stub is "", else as one text block holding Stub (its head
// and tail with the artifact URI of the whole).
type Carried struct {
	// Seq is the message's seq in the session's log.
	Seq uint64 `json:"seq"`
	// Stub, when not "", is the bounded text sent instead of the message.
	Stub string `json:"stub,omitempty"`
}

// CheckpointEvent is the Data of a KindCheckpoint event: the checkpoint
// without its summary text, so a stream of events stays small.
type CheckpointEvent struct {
	SummaryBytes       uint64 `json:"summary_bytes"`
	Stalled            bool   `json:"stalled"`
	SnapshotSeq        uint64 `json:"snapshot_seq"`
	FirstRetainedSeq   uint64 `json:"first_retained_seq"`
	SummarizedMessages uint64 `json:"summarized_messages"`
	Binding            string `json:"binding"`
	PrunedRetry        bool   `json:"pruned_retry"`
	TokensBefore       uint64 `json:"tokens_before"`
	TokensAfter        uint64 `json:"tokens_after"`
	Shape              string `json:"shape,omitempty"`
	Reason             string `json:"reason,omitempty"`
	// RequestSeq and FirstRequestSeq are the seqs of the carried requests
	// (0: none); Fallback marks a summary by the extractive fallback.
	RequestSeq      uint64 `json:"request_seq,omitempty"`
	FirstRequestSeq uint64 `json:"first_request_seq,omitempty"`
	Fallback        bool   `json:"fallback,omitempty"`
}

func (cp *Checkpoint) event() CheckpointEvent {
	ev := CheckpointEvent{
		SummaryBytes: cp.SummaryBytes, Stalled: cp.Stalled,
		SnapshotSeq: cp.SnapshotSeq, FirstRetainedSeq: cp.FirstRetainedSeq,
		SummarizedMessages: cp.SummarizedMessages, Binding: cp.Binding,
		PrunedRetry: cp.PrunedRetry, TokensBefore: cp.TokensBefore,
		TokensAfter: cp.TokensAfter, Shape: cp.Shape, Reason: cp.Reason,
		Fallback: cp.Fallback,
	}
	if cp.Request != nil {
		ev.RequestSeq = cp.Request.Seq
	}
	if cp.FirstRequest != nil {
		ev.FirstRequestSeq = cp.FirstRequest.Seq
	}
	return ev
}

// ValidSessionID checks a session id: 1 to 128 characters from
// [A-Za-z0-9._-], not "." or "..". Errors wrap ErrInvalid.
func ValidSessionID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty session id", ErrInvalid)
	}
	if len(id) > MaxSessionIDLen {
		return fmt.Errorf("%w: session id is %d bytes, longer than %d", ErrInvalid, len(id), MaxSessionIDLen)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%w: session id %q is reserved", ErrInvalid, id)
	}
	for i, c := range id { // by code point, so the message shows the character typed
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: session id %q: character %q at byte %d is not one of [A-Za-z0-9._-]", ErrInvalid, id, c, i)
		}
	}
	return nil
}

// MaxRowBytes is the largest listing row PutRow takes, in bytes.
const MaxRowBytes = 1024

// Listed is one session of a ListPage page.
type Listed struct {
	// ID is the session id.
	ID string
	// Meta is the session's metadata.
	Meta Meta
	// Row is the listing row PutRow stored last (nil when none was).
	Row []byte
	// LastSeq is the seq of the session's last event, 0 when it has none.
	LastSeq uint64
}

// MaxSessionIDLen is the longest session id, in bytes.
const MaxSessionIDLen = 128
