package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

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
// discarded (stage.go).
func (e *Engine) appendWith(ctx context.Context, id string, msgs []history.Message, opts AppendOptions, st *Staged) (AppendResult, error) {
	if opts.ClientState != nil && !json.Valid(opts.ClientState) {
		return AppendResult{}, invalidField("client_state", "not valid JSON")
	}
	if len(msgs) == 0 && opts.ClientState == nil {
		return AppendResult{}, invalidField("messages", "no messages to append")
	}
	for i := range msgs {
		if msgs[i].Seq != 0 {
			return AppendResult{}, invalidField(fmt.Sprintf("messages[%d].seq", i), "seq is assigned by ctxd; leave it out")
		}
		if msgs[i].Tokens != 0 {
			return AppendResult{}, invalidField(fmt.Sprintf("messages[%d].tokens", i), "tokens are counted by ctxd; leave them out")
		}
	}

	var digest string
	if opts.IdempotencyKey != "" {
		if err := checkpoint.ValidIdempotencyKey(opts.IdempotencyKey); err != nil {
			return AppendResult{}, invalidField("Idempotency-Key", "%s", strings.TrimPrefix(err.Error(), checkpoint.ErrInvalid.Error()+": "))
		}
		digest = appendDigest(msgs, opts.ClientState)
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

	// Expand abandoned rounds, then validate the whole batch against a
	// scratch state: all or nothing.
	expanded, closed := history.CloseAbandoned(s.state, msgs)
	origin := originIndexes(msgs, expanded)
	if err := history.ValidateBatch(s.state, expanded); err != nil {
		var ve *history.ValidationError
		if errors.As(err, &ve) {
			return AppendResult{}, invalidField(fmt.Sprintf("messages[%d].%s", origin[ve.Index], ve.Field), "%s", ve.Message)
		}
		return AppendResult{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}

	if s.model.ThinkingBinding {
		// A thinking-bound model (docs/design.md §4) rejects a thinking block
		// whose signature is missing; storing one would break every later
		// request of the session.
		for i, m := range expanded {
			for j, b := range m.Content {
				if m.Role == history.RoleAssistant && b.Type == history.BlockThinking && b.Signature == "" {
					return AppendResult{}, invalidField(fmt.Sprintf("messages[%d].content[%d].signature", origin[i], j),
						"required on a thinking block for model %q, which binds thinking to the provider's signature: send the signature, or leave the block out", s.meta.Model)
				}
			}
		}
	}

	now := e.opts.Now().UTC()
	// Layer 1: offload oversized tool results (on a copy: msgs is the
	// caller's).
	expanded = slices.Clone(expanded)
	expanded, offloaded := e.offloadMessages(ctx, s, expanded, st)

	events := make([]checkpoint.Event, 0, len(expanded)+len(offloaded)+1)
	if len(closed) > 0 {
		ids := make([]string, len(closed))
		for i, c := range closed {
			ids[i] = c.ID
		}
		d, _ := json.Marshal(map[string]any{"tool_call_ids": ids})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindAbandonedRound, Time: now, Data: d})
	}
	stored := make([]history.Message, len(expanded))
	at := make([]int, len(expanded)) // index in events of each message
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
			return AppendResult{}, invalidField(fmt.Sprintf("messages[%d]", origin[i]), "%v", err)
		}
		m = c
		e.est.Fill(&m)
		stored[i] = m
		if ev, ok := offloaded[i]; ok {
			ev.Time = now
			events = append(events, ev)
		}
		at[i] = len(events)
		events = append(events, checkpoint.Event{Kind: checkpoint.KindMessage, Time: now, Message: &stored[i]})
	}
	if opts.ClientState != nil {
		events = append(events, checkpoint.Event{Kind: checkpoint.KindClientState, Time: now, Data: opts.ClientState})
	}
	if opts.IdempotencyKey != "" {
		events[len(events)-1].Idempotency = &checkpoint.Idempotency{Key: opts.IdempotencyKey, FirstSeq: s.lastSeq + 1, Digest: digest}
	}
	var first uint64
	if st != nil {
		// Staged: a pending staged append is written first (the new one
		// follows it in the log), then this one is registered; memory is
		// brought up to date below as after a write.
		err = e.settle(ctx, id)
		if err == nil {
			first = s.lastSeq + 1
			e.stage(s, st, s.lastSeq, events, offloaded)
		}
	} else {
		first, err = e.opts.Log.AppendAt(ctx, id, s.lastSeq, events)
	}
	if errors.Is(err, checkpoint.ErrConflict) || (st != nil && err != nil) {
		// Another writer took the position: validate again on the log's
		// state (docs/design.md §9).
		s.mu.Unlock()
		e.drop(id, s)
		s.mu.Lock() // for the deferred Unlock
		return AppendResult{}, errStale
	}
	if err != nil {
		return AppendResult{}, mapLogErr(id, err)
	}
	// The log is durable (or the append staged): bring memory up to
	// date.
	var usageMsg *history.Message
	before, _ := s.estimate()
	for i := range stored {
		stored[i].Seq = first + uint64(at[i])
		s.state.Apply(stored[i])
		if ev, ok := offloaded[i]; ok && ev.Kind == checkpoint.KindOffload {
			var rec struct {
				Path string `json:"path"`
			}
			_ = json.Unmarshal(ev.Data, &rec)
			s.offloads[stored[i].ToolCallID] = rec.Path
		}
		s.addActive(stored[i])
		if history.LastCompaction(stored[i]) >= 0 {
			// Shape server: the provider's compaction is the checkpoint
			// (docs/design.md §10).
			e.recordServerCompaction(ctx, s, stored[i], before)
		}
		if stored[i].Role == history.RoleAssistant && stored[i].Usage != nil {
			usageMsg = &stored[i]
		}
	}
	s.lastSeq = first + uint64(len(events)) - 1
	if ik := events[len(events)-1].Idempotency; ik != nil {
		s.rememberKey(*ik, s.lastSeq)
	}
	s.touch(now)
	if opts.ClientState != nil {
		s.clientState = opts.ClientState
	}
	var others []checkpoint.Event
	for i, ev := range events {
		if ev.Kind != checkpoint.KindMessage {
			ev.Seq = first + uint64(i)
			others = append(others, ev)
		}
	}
	// A prompt or tool change deferred by a tool loop that has now ended.
	others = append(others, e.applyPending(ctx, s)...)
	// Layer 2: a context-edit pass, when one fires.
	others = append(others, e.planPass(ctx, s)...)
	e.metrics.Appended(len(stored))

	res := AppendResult{Messages: stored, Abandoned: len(closed), FirstSeq: first, LastSeq: s.lastSeq, Events: others, Threshold: s.threshold}
	res.Tokens, res.TokensSource = s.estimate()
	if usageMsg != nil && usageMsg.Usage.TotalTokens() > 0 {
		// Post-check (docs/design.md §5.1): the reported usage of the newest
		// response against the threshold. Later messages of this batch
		// count too, so the check never lags the log.
		d := e.check(ctx, s, trigger.PostCheck)
		res.Decision = d.Reason
		if d.Compact {
			if _, err := e.submit(s.id, trigger.PostCheck, workers.Background); err == nil {
				res.CompactionQueued = true
			} else {
				e.log.Warn("post-check compaction not queued", "session", s.id, "err", err)
			}
		} else {
			e.maybePrepare(s)
		}
		e.noteRequest(s, usageMsg.Usage, now)
	}
	e.saveRow(s)
	return res, nil
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
