package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ctxd/ctxd/config"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// CircuitFailures is how many consecutive failed compactions in a run open
// the circuit (DESIGN.md §5.5).
const CircuitFailures = 3

// ErrOpenRound: a compaction was asked for while a tool call waits on its
// result; its message is exactly trigger.NotCompactingOpenRound
// (DESIGN.md §5.1).
var ErrOpenRound = fmt.Errorf("%w: %s", ErrConflict, trigger.NotCompactingOpenRound)

// ErrNothingToCompact: the session has no message a summary could replace.
var ErrNothingToCompact = fmt.Errorf("%w: nothing to compact", ErrConflict)

// CompactResult is the outcome of a compaction request.
type CompactResult struct {
	// Queued: the compaction runs in the background (no wait).
	Queued bool
	// Joined: a compaction of the session was already queued or running
	// and this request joined it (DESIGN.md §8a).
	Joined bool
	// Checkpoint is the checkpoint written, when waited for.
	Checkpoint *checkpoint.Checkpoint
}

// Compact compacts session id now (DESIGN.md §5, §7 POST compact). reason is
// trigger.Manual or trigger.Overflow: both work with auto = false and with
// the circuit open. A session with an open tool round answers ErrConflict
// with exactly trigger.NotCompactingOpenRound. With wait, Compact returns
// once the checkpoint is written; else at once.
//
// Errors: ErrInvalid (reason), ErrNotFound, ErrConflict (open round,
// nothing to compact), ErrUnavailable (queue full), the compaction's error
// (wrapping summarizer.ErrAllBindingsFailed) when waited for, ctx's.
func (e *Engine) Compact(ctx context.Context, id string, reason trigger.Signal, wait bool) (CompactResult, error) {
	if reason != trigger.Manual && reason != trigger.Overflow {
		return CompactResult{}, invalidField("reason", "must be %q or %q, got %q", trigger.Manual, trigger.Overflow, reason)
	}
	s, err := e.lock(ctx, id)
	if err != nil {
		return CompactResult{}, err
	}
	e.refresh(s)
	d := e.check(s, reason)
	if d.Compact && (len(s.active) == 0 || (reason == trigger.Manual && !s.newGroupSinceCheckpoint())) {
		// A manual compaction with nothing new would only summarize the
		// summary again. (Overflow may still try: a stalled session can
		// need its summary shortened.)
		d = trigger.Decision{Reason: "nothing to compact: no message since the last checkpoint"}
		s.lastCheck.Fired, s.lastCheck.Reason = false, d.Reason
		s.mu.Unlock()
		return CompactResult{}, fmt.Errorf("%w: no message since the last checkpoint", ErrNothingToCompact)
	}
	before := s.lastCheckpointSeq()
	open := s.openRound()
	s.mu.Unlock()
	if !d.Compact {
		if open {
			return CompactResult{}, ErrOpenRound
		}
		return CompactResult{}, fmt.Errorf("%w: %s", ErrConflict, d.Reason)
	}
	t, err := e.submit(id, reason)
	if err != nil {
		return CompactResult{}, err
	}
	res := CompactResult{Queued: !wait, Joined: t.Joined}
	if !wait {
		return res, nil
	}
	if err := t.Wait(ctx); err != nil {
		return res, err
	}
	if s, err = e.lock(ctx, id); err != nil {
		return res, err
	}
	defer s.mu.Unlock()
	if s.cp != nil && s.cp.Seq != before {
		cp := *s.cp
		res.Checkpoint = &cp
	}
	return res, nil
}

// WaitCompaction waits for the session's queued or running compaction, if
// any, and returns its error (nil when none). Errors: the job's, ctx's.
func (e *Engine) WaitCompaction(ctx context.Context, id string) error {
	t := e.opts.Pool.Active(id)
	if t == nil {
		return nil
	}
	return t.Wait(ctx)
}

func (s *session) lastCheckpointSeq() uint64 {
	if s.cp == nil {
		return 0
	}
	return s.cp.Seq
}

// submit queues a compaction of the session in the worker pool, or joins the
// one queued or running. Errors: ErrUnavailable.
func (e *Engine) submit(id string, sig trigger.Signal) (*workers.Ticket, error) {
	t, err := e.opts.Pool.Submit(id, func(ctx context.Context) error {
		return e.runCompaction(ctx, id, sig)
	})
	switch {
	case errors.Is(err, workers.ErrQueueFull):
		return nil, fmt.Errorf("%w: the compaction queue is full; try again shortly", ErrUnavailable)
	case errors.Is(err, workers.ErrClosed):
		return nil, fmt.Errorf("%w: ctxd is shutting down", ErrUnavailable)
	case err != nil:
		return nil, err
	}
	return t, nil
}

// snapshot is what a compaction works from, taken under the session lock.
type snapshot struct {
	seq          uint64 // last message seq covered
	sent         []history.Message
	raw          []entry // the active entries covered (retention candidates)
	tokensBefore uint64
	messages     uint64 // messages in the log up to seq
}

// runCompaction is one compaction job (DESIGN.md §5): snapshot →
// summarizer → retention → checkpoint (one transaction) → events. Messages
// appended while the summarizer runs follow the summary.
func (e *Engine) runCompaction(ctx context.Context, id string, sig trigger.Signal) error {
	// While this job is queued or running the session is never evicted,
	// so s stays the live copy across the unlocked summarizer call.
	s, err := e.lock(ctx, id)
	if err != nil {
		return err
	}

	// 1. Snapshot, re-deciding under the lock: the state may have changed
	// since the job was queued.
	e.refresh(s)
	tokens, _ := e.estimate(s)
	d := trigger.Decide(sig, s.triggerState(tokens))
	if !d.Compact {
		open := s.openRound()
		s.mu.Unlock()
		switch {
		case sig.Automatic():
			return nil // nothing to do any more; not a failure
		case open:
			return ErrOpenRound
		}
		return fmt.Errorf("%w: %s", ErrConflict, d.Reason)
	}
	if len(s.active) == 0 {
		s.mu.Unlock()
		return ErrNothingToCompact
	}
	snap := snapshot{seq: s.lastMsg, tokensBefore: tokens}
	s.compacting = true
	defer func() {
		s.mu.Lock()
		s.compacting = false
		s.mu.Unlock()
	}()
	snap.sent = e.activeMessages(s)
	snap.raw = append([]entry(nil), s.active...)
	snap.messages = s.messages // every message so far is at or before snap.seq
	var prevSummarized uint64
	if s.cp != nil {
		prevSummarized = s.cp.SummarizedMessages
	}
	af, afErr := s.agentFile, s.agentErr
	req := summarizer.Request{
		System:            s.system,
		Tools:             s.tools,
		Messages:          snap.sent,
		MaxSummaryBytes:   s.cfg.ContextCompaction.MaxSummaryBytes,
		Timeout:           config.SummarizerTimeout(af),
		ArtifactReadTools: s.cfg.ContextEditing.ArtifactReadTools,
	}
	if af != nil {
		req.Prompt = af.Prompt
	}
	bindings := s.cfg.Summarizer.Bindings
	if fn := e.bindings.Load(); fn != nil {
		own, ok, err := (*fn)(id, s.meta.Labels)
		if err != nil {
			s.compacting = false
			s.mu.Unlock()
			if sig.Automatic() {
				e.log.Info("compaction waits for the session's client", "session", id, "reason", err)
				return nil
			}
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if ok {
			bindings = own
		}
	}
	shape := s.shape
	cfg := s.cfg
	started, _ := json.Marshal(map[string]any{"reason": reasonOf(sig), "signal": sig, "snapshot_seq": snap.seq, "tokens_before": tokens})
	s.mu.Unlock()

	if afErr != nil {
		return e.fail(ctx, s, sig, afErr, nil)
	}
	if seq, err := e.opts.Log.Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindCompactionStarted, Data: started}}); err == nil {
		s.mu.Lock()
		s.lastSeq = max(s.lastSeq, seq)
		s.mu.Unlock()
	}

	// 2. The summarizer call, outside the lock: appends go on meanwhile.
	if hook := e.opts.OnSummarizerRequest; hook != nil {
		if msgs, err := req.Assemble(); err == nil {
			hook(id, msgs)
		}
	}
	start := time.Now()
	res, err := e.opts.Summarizer.Summarize(ctx, bindings, req, artifactAdapter{e.opts.Artifacts})
	for _, at := range res.Attempts {
		e.metrics.SummarizerCall(at.Binding, at.Duration, at.Err)
	}
	if err != nil {
		return e.fail(ctx, s, sig, err, res.Attempts)
	}
	e.log.Debug("summarizer answered", "session", id, "binding", res.Binding, "elapsed", time.Since(start))

	// 3. Retention (DESIGN.md §5.2) on the snapshot's own messages.
	summary := res.Summary
	cp := checkpoint.Checkpoint{
		Summary:            summary,
		SnapshotSeq:        snap.seq,
		SummarizedMessages: snap.messages,
		Binding:            res.Binding,
		PrunedRetry:        res.PrunedRetry,
		TokensBefore:       snap.tokensBefore,
		Shape:              shape,
		Reason:             reasonOf(sig),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	summaryTokens := e.est.Message(summaryMessage(cp))
	target := trigger.Retention{
		KeepRecentTokens: cfg.ContextCompaction.KeepRecentTokens,
		ContextLimit:     s.limit,
		FixedTokens:      e.calibrate(s, s.fixedTokens+summaryTokens),
		Shape:            shape,
	}.Target()
	// Current entries of the snapshot's range (a context-edit pass may have
	// changed their sent form meanwhile).
	var covered []entry
	for _, en := range s.active {
		if en.msg.Seq <= snap.seq {
			covered = append(covered, en)
		}
	}
	msgs := make([]history.Message, len(covered))
	toks := make([]uint64, len(covered))
	for i, en := range covered {
		msgs[i] = en.msg
		toks[i] = e.calibrate(s, en.tokens)
	}
	start2 := trigger.RetainedStart(history.Groups(msgs).Groups, toks, target)
	if start2 < len(covered) {
		cp.FirstRetainedSeq = covered[start2].msg.Seq
	}
	// The summary stands for every message up to the snapshot except the
	// retained ones.
	cp.SummarizedMessages = snap.messages - uint64(len(covered)-start2)

	// 4. Tokens after, and the stall check (DESIGN.md §5.5).
	var after uint64 = s.fixedTokens + summaryTokens
	for _, en := range s.active {
		if (cp.FirstRetainedSeq > 0 && en.msg.Seq >= cp.FirstRetainedSeq) || en.msg.Seq > snap.seq {
			after += en.tokens
		}
	}
	cp.TokensAfter = e.calibrate(s, after)
	cp.Stalled = cp.TokensAfter >= s.threshold
	if cp.SummarizedMessages <= prevSummarized && cp.TokensAfter >= cp.TokensBefore {
		// Every message since the last checkpoint fits in the retention
		// budget and the new summary is no shorter than the old: committing
		// would only grow the context. A failed compaction, so automatic
		// signals cannot loop on it (DESIGN.md §5.5).
		return e.failLocked(ctx, s, sig, fmt.Errorf("%w: every message since the last checkpoint fits in the retention budget of %d tokens (keep_recent_tokens)",
			ErrNothingToCompact, target), res.Attempts)
	}

	stored, err := e.opts.Log.PutCheckpoint(ctx, id, cp)
	if err != nil {
		return e.failLocked(ctx, s, sig, fmt.Errorf("writing the checkpoint: %w", err), res.Attempts)
	}
	s.lastSeq = max(s.lastSeq, stored.Seq)
	e.applyCheckpoint(s, stored)
	s.lastError = ""

	// 5. Thinking the rewrite invalidated is no longer replayed
	// (DESIGN.md §4): everything at or before the snapshot.
	var events []checkpoint.Event
	if s.model.ThinkingBinding && e.thinkingBefore(s, snap.seq+1) {
		s.ledger.Withhold(snap.seq + 1)
		d, _ := json.Marshal(prefixReset{Cause: "compaction", WithheldBefore: snap.seq + 1})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindPrefixReset, Data: d})
		e.retokenize(s)
	}
	if stored.Stalled {
		e.metrics.Compaction("stalled")
		d, _ := json.Marshal(map[string]any{"level": "warning", "code": "stall",
			"message":        fmt.Sprintf("checkpoint %d left the context at %d tokens, at or above the threshold of %d", stored.Seq, stored.TokensAfter, s.threshold),
			"checkpoint_seq": stored.Seq, "consecutive": s.failures})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindDiagnostic, Data: d})
		events = append(events, e.maybeOpenCircuit(s)...)
	} else {
		e.metrics.Compaction("ok")
	}
	if len(events) > 0 {
		if seq, err := e.opts.Log.Append(ctx, id, events); err == nil {
			s.lastSeq = max(s.lastSeq, seq+uint64(len(events))-1)
		} else {
			e.log.Warn("recording compaction events", "session", id, "err", err)
		}
	}
	if stored.Stalled {
		return fmt.Errorf("%w: compaction stalled: %d tokens after it, threshold %d", ErrConflict, stored.TokensAfter, s.threshold)
	}
	return nil
}

// maybeOpenCircuit opens the circuit when the run's consecutive failures
// reach CircuitFailures, returning the one circuit_open event. Called with
// s.mu held after s.failures was counted.
func (e *Engine) maybeOpenCircuit(s *session) []checkpoint.Event {
	if s.circuitOpen || s.failures < CircuitFailures {
		return nil
	}
	s.circuitOpen = true
	e.metrics.CircuitOpened()
	d, _ := json.Marshal(map[string]any{"failures": s.failures,
		"message": fmt.Sprintf("automatic compaction stopped for this run after %d consecutive failures; manual and overflow compaction still work", s.failures)})
	return []checkpoint.Event{{Kind: checkpoint.KindCircuitOpen, Data: d}}
}

// fail records a failed compaction: the count, the event, the circuit.
func (e *Engine) fail(ctx context.Context, s *session, sig trigger.Signal, cause error, attempts []summarizer.Attempt) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.failLocked(ctx, s, sig, cause, attempts)
}

func (e *Engine) failLocked(ctx context.Context, s *session, sig trigger.Signal, cause error, attempts []summarizer.Attempt) error {
	s.failures++
	s.lastError = cause.Error()
	e.metrics.Compaction("failed")
	type attemptJSON struct {
		Binding string `json:"binding"`
		Class   string `json:"class"`
		Pruned  bool   `json:"pruned,omitempty"`
		Status  int    `json:"status,omitempty"`
		Message string `json:"message"`
	}
	var list []attemptJSON
	for _, a := range attempts {
		if a.Err == nil {
			continue
		}
		list = append(list, attemptJSON{Binding: a.Binding, Class: a.Class.String(), Pruned: a.Pruned, Status: a.Status, Message: a.Err.Error()})
	}
	d, _ := json.Marshal(map[string]any{"reason": reasonOf(sig), "signal": sig, "message": cause.Error(), "attempts": list, "consecutive": s.failures})
	events := []checkpoint.Event{{Kind: checkpoint.KindCompactionFailed, Data: d}}
	events = append(events, e.maybeOpenCircuit(s)...)
	// Record even if the job's context was cancelled: the failure happened.
	if seq, err := e.opts.Log.Append(context.WithoutCancel(ctx), s.id, events); err == nil {
		s.lastSeq = max(s.lastSeq, seq+uint64(len(events))-1)
	} else {
		e.log.Warn("recording a compaction failure", "session", s.id, "err", err)
	}
	e.log.Warn("compaction failed", "session", s.id, "signal", string(sig), "consecutive", s.failures, "err", cause)
	return cause
}

func reasonOf(sig trigger.Signal) string {
	if sig.Automatic() {
		return "auto"
	}
	return string(sig)
}

// artifactAdapter lets the summarizer's pruned retry retain tool results in
// the artifact store.
type artifactAdapter struct{ store ArtifactStore }

func (a artifactAdapter) Retain(ctx context.Context, content []byte, format string) (string, error) {
	if a.store == nil {
		return "", errors.New("no artifact store")
	}
	id, err := a.store.Retain(ctx, content, artifacts.Format(format))
	if err != nil {
		return "", err
	}
	return id.URI(), nil
}
