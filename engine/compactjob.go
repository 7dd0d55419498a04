package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/recall"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
)

// snapshot is what a compaction works from, taken under the session lock.
type snapshot struct {
	seq          uint64 // last message seq covered
	sent         []history.Message
	raw          []entry // the active entries covered (retention candidates)
	tokensBefore uint64
	messages     uint64 // messages in the log up to seq
}

// compaction is the plan of one compaction job, made under the session
// lock (planCompaction): what it summarizes and how.
type compaction struct {
	sig  trigger.Signal
	snap snapshot
	// deep: a deeper overflow compaction (CompactDeeper), which retains
	// nothing.
	deep bool
	// base is the latest checkpoint's seq when planned and prevSummarized
	// the messages its summary stands for (0 before the first).
	base, prevSummarized uint64
	// inst is the speculative summary installed instead of a summarizer
	// call (docs/design.md §5.1), nil when none.
	inst *install
	req  summarizer.Request
	// bindings are the summarizer bindings tried, in order; fallback is
	// the implicit extractive one's name ("" when none was added); missing
	// is the binding the session's configuration names that the daemon's
	// no longer defines ("" when none); afErr is why the session's agent
	// file could not be loaded.
	bindings []config.Binding
	fallback string
	missing  string
	afErr    error
	// shape is the checkpoint's shape; folded: the compaction folds an
	// open tool loop of a thinking-bound model (docs/design.md §4a).
	shape  string
	folded bool
}

// runCompaction is one compaction job (docs/design.md §5): plan under the
// session lock (planCompaction: re-decide, snapshot, summarizer request and
// bindings) and record its start; summarize outside it; then under it
// again retention (retain), the checkpoint written in one transaction and
// applied to the session's state (commitCheckpoint), and the events that
// follow it (recordCompaction). Messages appended while the summarizer
// runs follow the summary.
func (e *Engine) runCompaction(ctx context.Context, id string, sig trigger.Signal) error {
	// While this job is queued or running the session is never evicted,
	// so s stays the live copy across the unlocked summarizer call.
	s, err := e.lock(ctx, id)
	if err != nil {
		return err
	}
	c, err := e.planCompaction(s, sig)
	if c == nil {
		s.mu.Unlock()
		return err
	}
	s.compacting, s.summarizing = true, c.inst == nil
	defer func() {
		s.mu.Lock()
		s.compacting, s.summarizing = false, false
		s.mu.Unlock()
	}()
	e.startCompaction(ctx, s, c)
	s.mu.Unlock()

	if err := c.unrunnable(); err != nil {
		return e.fail(ctx, s, sig, err, nil)
	}
	// The summarizer call, outside the lock: appends go on meanwhile.
	res, err := e.summarize(ctx, s, c)
	if err != nil {
		return e.fail(ctx, s, sig, err, res.Attempts)
	}
	recallDir, recallErr := s.offloader.SessionDir(id)
	summary, cp := c.draft(res, recallDir)

	s.mu.Lock()
	defer s.mu.Unlock()
	replaced, target := e.retain(ctx, s, c, &cp)
	if cp.SummarizedMessages <= c.prevSummarized && cp.TokensAfter >= cp.TokensBefore {
		// Every message since the last checkpoint fits in the retention
		// budget and the new summary is no shorter than the old: committing
		// would only grow the context.
		return e.nothingCompacted(ctx, s, target)
	}
	cp.Summary = summary + e.writeRecall(s, replaced, recallDir, recallErr)
	stored, err := e.commitCheckpoint(ctx, s, c, cp)
	if err != nil {
		return e.failLocked(ctx, s, sig, fmt.Errorf("writing the checkpoint: %w", err), res.Attempts)
	}
	return e.recordCompaction(ctx, s, c, stored)
}

// planCompaction re-decides a compaction by sig under the lock (the
// session may have changed since the job was queued) and, when it is to
// run, takes its snapshot and plans it. A nil plan ends the job with the
// error returned: nil when an automatic compaction has nothing to do any
// more or waits for the session's client, ErrOpenRound, ErrConflict or
// nothingErr otherwise. Called with s.mu held.
func (e *Engine) planCompaction(s *session, sig trigger.Signal) (*compaction, error) {
	e.refresh(s)
	s.afterPrepare = "" // this is the compaction it asked for
	tokens, _ := s.estimate()
	d, _ := e.decide(s, sig, tokens)
	if !d.Compact {
		switch {
		case sig.Automatic():
			return nil, nil // nothing to do any more; not a failure
		case s.openRound():
			return nil, ErrOpenRound
		}
		return nil, fmt.Errorf("%w: %s", ErrConflict, d.Reason)
	}
	if why := e.nothingToCompact(s, sig); why != "" {
		return nil, nothingErr(why)
	}
	c := &compaction{sig: sig, base: s.lastCheckpointSeq()}
	c.snap = snapshot{seq: s.lastMsg, tokensBefore: tokens, sent: s.activeMessages(),
		raw: append([]entry(nil), s.active...), messages: s.messages} // every message so far is at or before seq
	c.deep = sig == trigger.Overflow && s.retainNothing
	s.retainNothing = false
	// A speculative summary is installed instead of a summarizer call
	// (docs/design.md §5.1): the snapshot is the one it covers.
	if c.inst = e.installable(s, sig, c.deep); c.inst != nil {
		c.snap.seq, c.snap.messages, c.snap.raw = c.inst.seq, c.inst.messages, c.inst.raw
	}
	if s.cp != nil {
		c.prevSummarized = s.cp.SummarizedMessages
	}
	if err := e.planSummarizer(s, c); err != nil {
		if sig.Automatic() {
			e.log.Info("compaction waits for the session's client", "session", s.id, "reason", err)
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	c.shape = s.shape
	if c.shape == trigger.ShapeServer {
		// ctxd's own compaction under shape server (a fallback, a manual or
		// overflow compaction) is a simple one: the summary, nothing
		// retained; shape "server" marks the provider's checkpoints.
		c.shape = trigger.ShapeSimple
	}
	// A compaction inside an open tool loop of a thinking-bound model folds
	// the loop into the summary (docs/design.md §4a): retaining the loop would
	// send its final assistant message without the thinking the rewrite
	// withholds, which the provider refuses. Shape simple for this one.
	if c.folded = s.inThinkingLoop(); c.folded {
		c.shape = trigger.ShapeSimple
	}
	return c, nil
}

// planSummarizer sets the summarizer request of c and the bindings it
// tries: from compaction.binding on (docs/design.md §3), then the
// fallback; the session client's own bindings when the engine's bindings
// hook gives them, whose error it returns. Called with s.mu held.
func (e *Engine) planSummarizer(s *session, c *compaction) error {
	af := s.agentFile
	c.afErr = s.agentErr
	c.req = summarizer.Request{
		System:            s.system,
		Tools:             s.tools,
		Messages:          c.snap.sent,
		MaxSummaryBytes:   s.cfg.ContextCompaction.MaxSummaryBytes,
		ExtractiveBytes:   s.cfg.Compaction.ExtractiveSummaryBytes,
		Timeout:           config.SummarizerTimeout(af),
		ArtifactReadTools: s.cfg.ContextEditing.ArtifactReadTools,
		// The provider refused the session's request as too long: a
		// summarizer request extending it would be refused too.
		NoPrefix: c.sig == trigger.Overflow,
	}
	if af != nil {
		c.req.Prompt = af.Prompt
	}
	c.bindings, c.fallback = withFallback(s.cfg.SummarizerBindings(), s.cfg.Compaction.Fallback)
	c.missing = s.missingBinding
	if c.missing != "" {
		// The binding the session chose is gone: no other configured
		// binding (another provider, another price) is called in its
		// place; the extractive fallback (no network) is, when allowed.
		c.bindings, c.fallback = nil, ""
		if s.cfg.Compaction.Fallback != config.FallbackNone {
			c.bindings = []config.Binding{{Name: FallbackBinding, Provider: config.ProviderExtractive}}
			c.fallback = FallbackBinding
		}
	}
	if fn := e.bindings.Load(); fn != nil {
		own, ok, err := (*fn)(s.id, s.meta.Labels)
		if err != nil {
			return err
		}
		if ok {
			c.bindings, c.fallback = withFallback(own, s.cfg.Compaction.Fallback)
			c.missing = ""
		}
	}
	return nil
}

// unrunnable is why the planned compaction cannot run (its failure), nil
// when it can: the session's agent file did not load, or the binding the
// session names is gone and no fallback is allowed.
func (c *compaction) unrunnable() error {
	if c.afErr != nil {
		return c.afErr
	}
	if c.missing != "" && len(c.bindings) == 0 {
		return fmt.Errorf("%w: compaction.binding: the session's configuration names summarizer binding %q, which the daemon's configuration no longer defines, and compaction.fallback is %q: add the binding back to summarizer.bindings (and reload), or set fallback = %q", ErrInvalid, c.missing, config.FallbackNone, config.FallbackExtractive)
	}
	return nil
}

// startCompaction records the compaction_started event of a compaction
// that can run. Under the lock, so the loaded session's last seq never
// lags the log (appends are placed at it: checkpoint.Log.AppendAt).
// Called with s.mu held.
func (e *Engine) startCompaction(ctx context.Context, s *session, c *compaction) {
	if c.unrunnable() != nil {
		return
	}
	data := map[string]any{"reason": reasonOf(c.sig), "signal": c.sig, "snapshot_seq": c.snap.seq, "tokens_before": c.snap.tokensBefore}
	if c.inst != nil {
		data["prepared_seq"] = c.inst.prep.Seq
	}
	started, _ := json.Marshal(data)
	if seq, err := e.opts.Log.Append(ctx, s.id, []checkpoint.Event{{Kind: checkpoint.KindCompactionStarted, Data: started}}); err == nil {
		s.lastSeq = max(s.lastSeq, seq)
	}
}

// summarize is the summary of the planned compaction: the installed
// speculative summary, or the summarizer's answer, its calls recorded in
// metrics and the savings ledger. Called without s.mu.
func (e *Engine) summarize(ctx context.Context, s *session, c *compaction) (summarizer.Result, error) {
	if c.inst != nil {
		return summarizer.Result{Summary: c.inst.summary, Binding: c.inst.prep.Binding, PrunedRetry: c.inst.prep.PrunedRetry}, nil
	}
	if hook := e.opts.OnSummarizerRequest; hook != nil {
		if msgs, err := c.req.Assemble(); err == nil {
			hook(s.id, msgs)
		}
	}
	start := time.Now()
	res, err := e.opts.Summarizer.Summarize(ctx, c.bindings, c.req, artifactAdapter{e.opts.Artifacts})
	for _, at := range res.Attempts {
		e.metrics.SummarizerCall(at.Binding, at.Duration, at.Err)
	}
	purpose := ""
	if c.sig == trigger.Idle {
		purpose = ledger.PurposeIdle
	}
	if entries := summarizerEntriesFor(res.Attempts, c.bindings, e.modeOf(s), purpose); len(entries) > 0 {
		if lerr := e.RecordLedger(context.WithoutCancel(ctx), s.id, entries...); lerr != nil {
			e.log.Warn("summarizer calls not recorded in the ledger", "session", s.id, "err", lerr)
		}
	}
	if err != nil {
		return res, err
	}
	e.log.Debug("summarizer answered", "session", s.id, "binding", res.Binding, "elapsed", time.Since(start))
	return res, nil
}

// draft is the checkpoint the summary res makes of the snapshot, before
// retention, and the summary's text alone. The summary ends with where
// the full text of what it replaces is (docs/design.md §5.6 "Recall",
// under recallDir); the footer is sized here with the snapshot's range
// and written with the range retention leaves.
func (c *compaction) draft(res summarizer.Result, recallDir string) (string, checkpoint.Checkpoint) {
	summary := res.Summary
	if i := strings.Index(summary, "\n"+summarizer.HeadingFullHistory+"\n"); i >= 0 {
		// A summarizer that copied the earlier summary's recall paragraph:
		// this checkpoint's own replaces it.
		summary = summary[:i]
	}
	summary = strings.TrimRight(summary, "\n")
	var rangeFirst uint64
	if len(c.snap.raw) > 0 {
		rangeFirst = c.snap.raw[0].msg.Seq
	}
	cp := checkpoint.Checkpoint{
		Summary:            summary + recall.Footer(recallDir+"/"+recall.FileName(rangeFirst, c.snap.seq), recallDir, rangeFirst, c.snap.seq),
		SnapshotSeq:        c.snap.seq,
		SummarizedMessages: c.snap.messages,
		Binding:            res.Binding,
		PrunedRetry:        res.PrunedRetry,
		TokensBefore:       c.snap.tokensBefore,
		Shape:              c.shape,
		Reason:             reasonOf(c.sig),
		Fallback:           c.fallback != "" && res.Binding == c.fallback,
	}
	if c.inst != nil {
		cp.Fallback = c.inst.prep.Fallback
	}
	return summary, cp
}

// retain applies retention (docs/design.md §5.2) to the snapshot's own
// messages as they are now (a context-edit pass may have changed their
// sent form meanwhile): it sets cp's first retained seq, the messages its
// summary stands for, the requests it carries beside it, the tokens after
// it and whether it stalls (§5.5). It returns the entries the summary
// replaces and the retention budget, calibrated tokens. Called with s.mu
// held.
func (e *Engine) retain(ctx context.Context, s *session, c *compaction, cp *checkpoint.Checkpoint) (replaced []entry, target uint64) {
	summaryTokens := s.est.Message(summaryMessage(*cp))
	target = e.retentionTarget(s, c.shape, summaryTokens)
	if c.deep {
		target = 0
	}
	if c.inst != nil {
		// The messages after the prepared snapshot follow it verbatim:
		// they take their share of the budget first.
		target -= min(target, c.inst.tail)
	}
	var covered []entry
	for _, en := range s.active {
		if en.msg.Seq <= c.snap.seq {
			covered = append(covered, en)
		}
	}
	msgs := make([]history.Message, len(covered))
	toks := make([]uint64, len(covered))
	for i, en := range covered {
		msgs[i] = en.msg
		toks[i] = s.calibrate(en.tokens)
	}
	start := retainedStart(c.sig, msgs, toks, target, e.carriedFn(s))
	keepFrom := c.snap.seq + 1
	if start < len(covered) {
		cp.FirstRetainedSeq = covered[start].msg.Seq
		keepFrom = cp.FirstRetainedSeq
	}
	// The summary stands for every message up to the snapshot except the
	// retained ones and the requests carried beside it.
	cp.SummarizedMessages = c.snap.messages - uint64(len(covered)-start)
	cp.Request, cp.FirstRequest = e.carry(ctx, s, keepFrom, summaryTokens)
	for _, cr := range []*checkpoint.Carried{cp.Request, cp.FirstRequest} {
		if cr != nil && cr.Seq <= c.snap.seq && cp.SummarizedMessages > 0 {
			cp.SummarizedMessages--
		}
	}
	cp.TokensAfter = s.scaled(s.rawAfter(*cp, summaryTokens))
	cp.Stalled = cp.TokensAfter >= s.threshold
	return covered[:start], target
}

// nothingCompacted ends a compaction whose checkpoint would replace
// nothing new: nothing to compact, an answer, not a failure
// (docs/design.md §5.2), recorded so the event stream shows the compaction
// ended. target is the retention budget. Called with s.mu held.
func (e *Engine) nothingCompacted(ctx context.Context, s *session, target uint64) error {
	why := fmt.Sprintf("every message since the last checkpoint fits in the retention budget of %d tokens (keep_recent_tokens)", target)
	d, _ := json.Marshal(map[string]any{"level": api.DiagLevelInfo, "code": api.DiagNothingToCompact, "message": "nothing to compact: " + why})
	if seq, err := e.opts.Log.Append(context.WithoutCancel(ctx), s.id, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic, Data: d}}); err == nil {
		s.lastSeq = max(s.lastSeq, seq)
	}
	return nothingErr(why)
}

// commitCheckpoint writes cp (one transaction) and applies it to the
// session's state, returning it as stored. Called with s.mu held.
func (e *Engine) commitCheckpoint(ctx context.Context, s *session, c *compaction, cp checkpoint.Checkpoint) (checkpoint.Checkpoint, error) {
	stored, err := e.opts.Log.PutCheckpoint(ctx, s.id, cp)
	if err != nil {
		return stored, err
	}
	s.lastSeq = max(s.lastSeq, stored.Seq)
	s.useCheckpoint(stored)
	s.lastError = ""
	e.preparedOutcome(ctx, s, c.inst, c.base)
	if c.sig == trigger.Idle {
		e.recordIdle(ctx, s, stored.TokensBefore, stored.TokensAfter)
	}
	return stored, nil
}

// recordCompaction records the events that follow a written checkpoint —
// a folded tool loop, a fallback summary, thinking the rewrite invalidated
// (no longer replayed, docs/design.md §4: everything at or before the
// snapshot), a stall and the circuit it may open — and returns ErrStalled
// for a stalled one. Called with s.mu held.
func (e *Engine) recordCompaction(ctx context.Context, s *session, c *compaction, stored checkpoint.Checkpoint) error {
	events := c.diagnostics(stored)
	if s.model.ThinkingBinding && e.thinkingBefore(s, c.snap.seq+1) {
		s.ledger.Withhold(c.snap.seq + 1)
		d, _ := json.Marshal(prefixReset{Cause: "compaction", WithheldBefore: c.snap.seq + 1})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindPrefixReset, Data: d})
		s.retokenize()
	}
	if stored.Stalled {
		e.metrics.Compaction("stalled")
		d, _ := json.Marshal(map[string]any{"level": api.DiagLevelWarn, "code": api.DiagStall,
			"message":        fmt.Sprintf("checkpoint %d left the context at %d tokens, at or above the threshold of %d", stored.Seq, stored.TokensAfter, s.threshold),
			"checkpoint_seq": stored.Seq, "consecutive": s.failures})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindDiagnostic, Data: d})
		events = append(events, e.maybeOpenCircuit(s)...)
	} else {
		e.metrics.Compaction("ok")
	}
	if len(events) > 0 {
		if seq, err := e.opts.Log.Append(ctx, s.id, events); err == nil {
			s.lastSeq = max(s.lastSeq, seq+uint64(len(events))-1)
		} else {
			e.log.Warn("recording compaction events", "session", s.id, "err", err)
		}
	}
	if stored.Stalled {
		return fmt.Errorf("%w: %d tokens after it, threshold %d", ErrStalled, stored.TokensAfter, s.threshold)
	}
	return nil
}

// diagnostics are the diagnostic events of the written checkpoint stored
// that the plan explains: a folded tool loop, a summary by the extractive
// fallback (and the missing binding that made it one).
func (c *compaction) diagnostics(stored checkpoint.Checkpoint) []checkpoint.Event {
	var events []checkpoint.Event
	if c.folded {
		d, _ := json.Marshal(map[string]any{"level": api.DiagLevelInfo, "code": api.DiagLoopFolded, "checkpoint_seq": stored.Seq,
			"message": "the compaction ran inside an open tool loop of a thinking-bound model: the loop is folded into the summary (shape simple for this compaction), so no message loses the thinking the provider requires"})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindDiagnostic, Data: d})
	}
	switch {
	case stored.Fallback && c.missing != "":
		d, _ := json.Marshal(map[string]any{"level": api.DiagLevelWarn, "code": api.DiagBindingMissing, "binding": c.missing,
			"message":        fmt.Sprintf("checkpoint %d was written by the extractive fallback: the session's configuration names summarizer binding %q, which the daemon's configuration no longer defines (add it back to summarizer.bindings and reload)", stored.Seq, c.missing),
			"checkpoint_seq": stored.Seq})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindDiagnostic, Data: d})
	case stored.Fallback:
		d, _ := json.Marshal(map[string]any{"level": api.DiagLevelWarn, "code": api.DiagFallback,
			"message":        fmt.Sprintf("checkpoint %d was written by the extractive fallback: every configured summarizer binding failed", stored.Seq),
			"checkpoint_seq": stored.Seq})
		events = append(events, checkpoint.Event{Kind: checkpoint.KindDiagnostic, Data: d})
	}
	return events
}
