package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// AppendResult is what an append stored (docs/design.md §7 POST messages).
type AppendResult struct {
	// Messages are the messages as stored, in order, with their seqs and
	// token estimates, offload stubs in place of offloaded results, and any
	// abandoned-round results ctxd inserted before a user prompt.
	Messages []history.Message
	// Abandoned is the number of abandoned-round results inserted.
	Abandoned int
	// CompactionQueued: the post-check found the reported usage at or above
	// the threshold and queued a compaction in the background.
	CompactionQueued bool
	// Decision is the post-check's reason, when a response carried usage.
	Decision string
	// FirstSeq and LastSeq bound every event this append wrote, messages
	// and others.
	FirstSeq, LastSeq uint64
	// Events are the events other than messages it wrote, in seq order
	// (abandoned_round, offload, session_updated and prefix_reset of a
	// change deferred by a tool loop that this append ended, context_edit,
	// prefix_reset).
	Events []checkpoint.Event
	// Tokens is the assembled context's size after the append, in tokens;
	// TokensSource "reported" or "estimated"; Threshold the session's.
	Tokens       uint64
	TokensSource string
	Threshold    uint64
	// Replayed: the append's idempotency key was used before, and this is
	// what that append stored (nothing was stored now).
	Replayed bool
}

// Append validates and stores msgs, in order, after the session's history.
// A user prompt arriving while tool calls are open is preceded by an error
// result for each open call (an abandoned round, docs/design.md §2). An assistant
// message carrying usage is the post-check (§5.1): at or above the threshold
// a compaction is queued and Append returns at once. Nothing is stored when
// any message is invalid. Append returns once the messages are durable.
//
// Errors: ErrInvalid (*FieldError naming messages[i].field, where i indexes
// msgs), ErrNotFound, the log's.
func (e *Engine) Append(ctx context.Context, id string, msgs []history.Message) (AppendResult, error) {
	return e.AppendWith(ctx, id, msgs, AppendOptions{})
}

// AppendOptions tune AppendWith.
type AppendOptions struct {
	// ClientState, when set, is recorded as a client_state event after the
	// messages, in the same durable write (all or nothing), and returned by
	// ClientState from then on, across restarts: the provider proxy's
	// record of what its client has sent (docs/design.md §10). With it, msgs may
	// be empty.
	ClientState json.RawMessage
	// IdempotencyKey, when set, makes the append idempotent (docs/api.md
	// "Retrying an append"): it is recorded with the append, and an
	// append with a key the session already has stores nothing and returns
	// what the first one stored (Replayed set); one with other messages
	// is ErrConflict. 1 to checkpoint.MaxIdempotencyKey printable ASCII
	// bytes; the newest maxIdemKeys keys of a session are remembered.
	IdempotencyKey string
	// NoCompaction: the post-check queues no compaction and no speculative
	// summary from this append's usage (the usage is recorded as usual):
	// the answer to a request with which the client compacted its own
	// conversation, whose history the client is about to replace.
	NoCompaction bool
	// AssembledAt, when set, is the LastSeq of the context the request
	// that msgs answer was sent from (Assembled.LastSeq). When a
	// checkpoint was written after it, the usage msgs report counts a
	// context the checkpoint replaced: it is not stored, and the estimate
	// rests on the checkpoint (a compaction deferred until the upstream
	// accepted the request, stage.go, ends before its answer is
	// recorded).
	AssembledAt uint64
}

// AppendWith is Append with options. Errors: Append's; ErrInvalid when
// ClientState is not valid JSON.
func (e *Engine) AppendWith(ctx context.Context, id string, msgs []history.Message, opts AppendOptions) (AppendResult, error) {
	for attempt := 0; ; attempt++ {
		res, err := e.appendWith(ctx, id, msgs, opts, nil)
		if !errors.Is(err, errStale) || attempt == maxAppendAttempts {
			if errors.Is(err, errStale) {
				err = fmt.Errorf("%w: session %q: other writers kept appending; try again", ErrUnavailable, id)
			}
			return res, err
		}
	}
}

// maxAppendAttempts bounds the retries of an append that lost the race for
// its position to another node (docs/design.md §9).
const maxAppendAttempts = 8

// errStale: the loaded session was behind the log; it was dropped and the
// append is retried on a reload.
var errStale = errors.New("session behind the log")

// appendWith is one attempt of AppendWith, or of Stage when st is set:
// then the events are registered on st instead of written, and the
// session's memory runs ahead of its log until st is committed or
// discarded (stage.go). Its steps: checkAppend (the request alone),
// then under the session lock planAppend (abandoned rounds, validation
// against the session's state), batchAppend (layer 1's offloads, the
// events), writeAppend (the log or the stage), applyAppend (the state
// brought up to date) and finishAppend (deferred changes, layer 2, the
// post-check).
func (e *Engine) appendWith(ctx context.Context, id string, msgs []history.Message, opts AppendOptions, st *Staged) (AppendResult, error) {
	digest, err := checkAppend(msgs, opts)
	if err != nil {
		return AppendResult{}, err
	}
	s, err := e.lock(ctx, id)
	if err != nil {
		return AppendResult{}, err
	}
	defer s.mu.Unlock()
	e.refresh(s)

	if r, ok := s.idem[opts.IdempotencyKey]; ok && opts.IdempotencyKey != "" {
		if r.digest != digest {
			return AppendResult{}, fmt.Errorf("%w: Idempotency-Key %q was used by the append of seqs %d–%d with other messages; use a new key for a new append", ErrConflict, opts.IdempotencyKey, r.first, r.last)
		}
		return e.replayAppend(ctx, s, r)
	}
	b, err := s.planAppend(msgs, s.meta.Model)
	if err != nil {
		return AppendResult{}, err
	}
	b.staged = st
	if err := e.batchAppend(ctx, s, b, opts, digest); err != nil {
		return AppendResult{}, err
	}
	first, err := e.writeAppend(ctx, s, b)
	if err != nil {
		return AppendResult{}, err
	}
	usageMsg := e.applyAppend(ctx, s, b, first, opts)
	return e.finishAppend(ctx, s, b, first, usageMsg, opts.NoCompaction), nil
}

// checkAppend checks an append's request before the session is locked:
// client state, messages, seqs and tokens left to ctxd, the idempotency
// key. It returns the request's digest when it has a key. Errors:
// ErrInvalid.
func checkAppend(msgs []history.Message, opts AppendOptions) (digest string, err error) {
	if opts.ClientState != nil && !json.Valid(opts.ClientState) {
		return "", invalidField("client_state", "not valid JSON")
	}
	if len(msgs) == 0 && opts.ClientState == nil {
		return "", invalidField("messages", "no messages to append")
	}
	for i := range msgs {
		if msgs[i].Seq != 0 {
			return "", invalidField(fmt.Sprintf("messages[%d].seq", i), "seq is assigned by ctxd; leave it out")
		}
		if msgs[i].Tokens != 0 {
			return "", invalidField(fmt.Sprintf("messages[%d].tokens", i), "tokens are counted by ctxd; leave them out")
		}
	}
	if opts.IdempotencyKey == "" {
		return "", nil
	}
	if err := checkpoint.ValidIdempotencyKey(opts.IdempotencyKey); err != nil {
		return "", invalidField("Idempotency-Key", "%s", strings.TrimPrefix(err.Error(), checkpoint.ErrInvalid.Error()+": "))
	}
	return appendDigest(msgs, opts.ClientState), nil
}

// appendBatch is one append as it is written: the messages after
// abandoned rounds were closed, then as stored, and the events.
type appendBatch struct {
	// staged is the Staged the append is registered on instead of written
	// (Engine.Stage), nil for a write.
	staged *Staged
	// expanded is msgs with an error result inserted for each call a user
	// prompt abandoned (closed); origin maps its indexes to msgs'.
	expanded []history.Message
	closed   []history.Call
	origin   []int
	now      time.Time
	// stored are the messages as stored (seqs set once written), at the
	// index in events of each, offloaded the offload event of each
	// offloaded one by index in stored.
	stored    []history.Message
	at        []int
	events    []checkpoint.Event
	offloaded map[int]checkpoint.Event
}

// planAppend expands abandoned rounds, then validates the whole batch
// against a scratch copy of the validation state: all or nothing. A
// thinking-bound model (docs/design.md §4), model by name, rejects a
// thinking block whose signature is missing; storing one would break
// every later request of the session. Errors: ErrInvalid (*FieldError
// naming messages[i].field, i indexing msgs).
func (st *sessionState) planAppend(msgs []history.Message, model string) (*appendBatch, error) {
	expanded, closed := history.CloseAbandoned(st.state, msgs)
	origin := originIndexes(msgs, expanded)
	if err := history.ValidateBatch(st.state, expanded); err != nil {
		var ve *history.ValidationError
		if errors.As(err, &ve) {
			return nil, invalidField(fmt.Sprintf("messages[%d].%s", origin[ve.Index], ve.Field), "%s", ve.Message)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if st.model.ThinkingBinding {
		for i, m := range expanded {
			for j, b := range m.Content {
				if m.Role == history.RoleAssistant && b.Type == history.BlockThinking && b.Signature == "" {
					return nil, invalidField(fmt.Sprintf("messages[%d].content[%d].signature", origin[i], j),
						"required on a thinking block for model %q, which binds thinking to the provider's signature: send the signature, or leave the block out", model)
				}
			}
		}
	}
	return &appendBatch{expanded: expanded, closed: closed, origin: origin}, nil
}

// batchAppend offloads the batch's oversized tool results (layer 1) and
// makes its events: the abandoned round, each message after its offload
// event, the client state, the idempotency key on the last. Errors: ErrInvalid (a message
// the store cannot take). Called with s.mu held.
func (e *Engine) batchAppend(ctx context.Context, s *session, b *appendBatch, opts AppendOptions, digest string) error {
	b.now = e.opts.Now().UTC()
	now := b.now
	// Layer 1: offload oversized tool results (on a copy: msgs is the
	// caller's).
	expanded := slices.Clone(b.expanded)
	expanded, b.offloaded = e.offloadMessages(ctx, s, expanded, b.staged)
	if opts.AssembledAt > 0 && s.lastCheckpointSeq() > opts.AssembledAt {
		// Usage of a context a checkpoint replaced since (AssembledAt).
		for i := range expanded {
			expanded[i].Usage = nil
		}
	}

	b.events = make([]checkpoint.Event, 0, len(expanded)+len(b.offloaded)+1)
	if len(b.closed) > 0 {
		ids := make([]string, len(b.closed))
		for i, c := range b.closed {
			ids[i] = c.ID
		}
		d, _ := json.Marshal(map[string]any{"tool_call_ids": ids})
		b.events = append(b.events, checkpoint.Event{Kind: checkpoint.KindAbandonedRound, Time: now, Data: d})
	}
	b.stored = make([]history.Message, len(expanded))
	b.at = make([]int, len(expanded))
	for i := range expanded {
		m := expanded[i]
		if m.Time.IsZero() {
			m.Time = now
		}
		m.Time = m.Time.UTC()
		// Keep in memory the form the store gives back, so a reload (a
		// restart, an eviction) serves the same bytes (docs/design.md §8).
		c, err := history.Canonical(m)
		if err != nil {
			return invalidField(fmt.Sprintf("messages[%d]", b.origin[i]), "%v", err)
		}
		m = c
		e.est.Fill(&m)
		b.stored[i] = m
		if ev, ok := b.offloaded[i]; ok {
			ev.Time = now
			b.events = append(b.events, ev)
		}
		b.at[i] = len(b.events)
		b.events = append(b.events, checkpoint.Event{Kind: checkpoint.KindMessage, Time: now, Message: &b.stored[i]})
	}
	if opts.ClientState != nil {
		b.events = append(b.events, checkpoint.Event{Kind: checkpoint.KindClientState, Time: now, Data: opts.ClientState})
	}
	if opts.IdempotencyKey != "" {
		b.events[len(b.events)-1].Idempotency = &checkpoint.Idempotency{Key: opts.IdempotencyKey, FirstSeq: s.lastSeq + 1, Digest: digest}
	}
	return nil
}

// writeAppend writes the batch's events at the session's last seq, or
// registers them on b.staged (a pending staged append is written first:
// the new one follows it in the log). It returns the first event's seq.
// Errors: errStale when another writer took the position (the session is
// dropped, to validate again on the log's state, docs/design.md §9), the
// log's. Called with s.mu held.
func (e *Engine) writeAppend(ctx context.Context, s *session, b *appendBatch) (first uint64, err error) {
	if st := b.staged; st != nil {
		// A pending staged append is written first; a session created
		// in memory stays so: the new append stores it.
		err = e.settleStaged(ctx, s.id)
		if err == nil {
			first = s.lastSeq + 1
			e.stage(s, st, s.lastSeq, b.events, b.offloaded)
		}
	} else {
		first, err = e.opts.Log.AppendAt(ctx, s.id, s.lastSeq, b.events)
	}
	if errors.Is(err, checkpoint.ErrConflict) || (b.staged != nil && err != nil) {
		// Another writer took the position: validate again on the log's
		// state (docs/design.md §9).
		s.mu.Unlock()
		e.drop(s.id, s)
		s.mu.Lock() // for the caller's deferred Unlock
		return 0, errStale
	}
	if err != nil {
		return 0, mapLogErr(s.id, err)
	}
	return first, nil
}

// applyAppend brings memory up to date with the batch written (or
// staged) at first: each message applied to the session's state in
// order, a provider compaction it holds recorded as the checkpoint (shape
// server, docs/design.md §10), the last seq, the idempotency key, the
// client state. It returns the newest assistant message with usage, nil
// when none. Called with s.mu held.
func (e *Engine) applyAppend(ctx context.Context, s *session, b *appendBatch, first uint64, opts AppendOptions) (usageMsg *history.Message) {
	before, _ := s.estimate()
	for i := range b.stored {
		b.stored[i].Seq = first + uint64(b.at[i])
		var off *checkpoint.Event
		if ev, ok := b.offloaded[i]; ok {
			off = &ev
		}
		s.memBytes.Add(s.applyStored(b.stored[i], off))
		if history.LastCompaction(b.stored[i]) >= 0 {
			e.recordServerCompaction(ctx, s, b.stored[i], before)
		}
		if b.stored[i].Role == history.RoleAssistant && b.stored[i].Usage != nil {
			usageMsg = &b.stored[i]
		}
	}
	s.lastSeq = first + uint64(len(b.events)) - 1
	if ik := b.events[len(b.events)-1].Idempotency; ik != nil {
		s.rememberKey(*ik, s.lastSeq)
	}
	s.touch(b.now)
	if opts.ClientState != nil {
		s.clientState = opts.ClientState
	}
	return usageMsg
}

// finishAppend is what follows an append applied: a prompt or tool change
// deferred by a tool loop that has now ended, layer 2's context-edit pass
// when one fires, and, when a response carried usage, the post-check,
// which queues a compaction or a speculative summary (neither with
// noCompaction, AppendOptions.NoCompaction; of a staged append, not
// before its commit: deferToCommit). It returns the append's result.
// Called with s.mu held.
func (e *Engine) finishAppend(ctx context.Context, s *session, b *appendBatch, first uint64, usageMsg *history.Message, noCompaction bool) AppendResult {
	var others []checkpoint.Event
	for i, ev := range b.events {
		if ev.Kind != checkpoint.KindMessage {
			ev.Seq = first + uint64(i)
			others = append(others, ev)
		}
	}
	// A prompt or tool change deferred by a tool loop that has now ended.
	others = append(others, e.applyPending(ctx, s)...)
	// Layer 2: a context-edit pass, when one fires (staged, it joins the
	// append's events: appendLog).
	others = append(others, e.planPass(ctx, s)...)
	e.metrics.Appended(len(b.stored))

	if l := s.learned; l != nil && l.Accepted && s.win.source == WindowLearned && s.maxAccepted > s.limit {
		// The provider accepted a request larger than the window learned
		// from the largest it had accepted: the window is at least that.
		if err := e.configure(s); err != nil {
			e.log.Warn("learned window not raised", "session", s.id, "err", err)
		}
	}
	res := AppendResult{Messages: b.stored, Abandoned: len(b.closed), FirstSeq: first, LastSeq: s.lastSeq, Events: others, Threshold: s.threshold}
	res.Tokens, res.TokensSource = s.estimate()
	if usageMsg != nil && usageMsg.Usage.TotalTokens() > 0 {
		// Post-check (docs/design.md §5.1): the reported usage of the newest
		// response against the threshold. Later messages of this batch
		// count too, so the check never lags the log.
		d := e.check(ctx, s, trigger.PostCheck)
		res.Decision = d.Reason
		switch {
		case noCompaction:
			res.Decision = "no post-check compaction: the client is compacting its own conversation"
		case b.staged != nil && e.deferToCommit(s, b.staged, d, true):
			// Not earned yet: no job before the commit (stage.go).
			if d.Compact {
				res.Decision += "; " + deferredWork
			}
		case d.Compact:
			if _, err := e.submitCheck(s, trigger.PostCheck, workers.Background); err == nil {
				res.CompactionQueued = true
			} else {
				e.log.Warn("post-check compaction not queued", "session", s.id, "err", err)
			}
		default:
			e.maybePrepare(s)
		}
		e.noteRequest(s, usageMsg.Usage, b.now)
	}
	e.saveRow(s)
	return res
}

// originIndexes maps each index of expanded (msgs with abandoned-round
// results inserted) to the index in msgs of the message it is or precedes.
func originIndexes(msgs, expanded []history.Message) []int {
	out := make([]int, len(expanded))
	j := 0
	for i := range expanded {
		out[i] = j
		if j < len(msgs) && sameMessage(&expanded[i], &msgs[j]) {
			j++
		}
	}
	return out
}

func sameMessage(a, b *history.Message) bool {
	return a.Role == b.Role && a.ToolCallID == b.ToolCallID && len(a.Content) == len(b.Content) &&
		(len(a.Content) == 0 || &a.Content[0] == &b.Content[0])
}

// ClientState returns the Data of the session's newest client_state event
// (AppendOptions.ClientState), nil when none. Errors: ErrNotFound, ErrInvalid
// (a bad id), the log's.
func (e *Engine) ClientState(ctx context.Context, id string) (json.RawMessage, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.clientState, nil
}
