package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// Speculative summaries (docs/design.md §5.1): when a session's context
// reaches the prepare mark (config.ContextCompaction.PrepareMark) its
// summary is made in the background, as a cache-friendly extension of the
// request it just sent (the same system prompt, tools and messages, the
// compaction prompt last: §5.3), and stored as a checkpoint.KindPrepared
// event. When the trigger fires, the compaction installs it instead of
// calling the summarizer: the summary covers the messages up to where it
// was prepared, and what came after follows it verbatim when it fits the
// retention budget, else is folded by an extractive summary of the new
// part appended to it (install). A session that outgrows its prepared
// summary by more than half the retention budget has it extended in the
// background: the summarizer reads the prepared summary and the messages
// after it. Every outcome is a ledger entry (ledger.KindPrepared).

// preparedSummary is a speculative summary: the Data of a
// checkpoint.KindPrepared event.
type preparedSummary struct {
	// Seq is the prepared event's seq (not stored: the event's own).
	Seq uint64 `json:"-"`
	// Base is the seq of the checkpoint the summary follows, 0 before the
	// first: a later checkpoint makes it stale.
	Base uint64 `json:"base_checkpoint_seq"`
	// SnapshotSeq is the newest message seq the summary covers, and
	// Messages the messages in the log up to it.
	SnapshotSeq uint64 `json:"snapshot_seq"`
	Messages    uint64 `json:"messages"`
	Summary     string `json:"summary"`
	Binding     string `json:"binding"`
	Fallback    bool   `json:"fallback,omitempty"`
	PrunedRetry bool   `json:"pruned_retry,omitempty"`
	// TokensBefore is the context when it was prepared, in tokens.
	TokensBefore uint64 `json:"tokens_before"`
	// Extends is the seq of the prepared event this one extends, 0 for
	// none; Cost is the summarizer cost of this summary and every one it
	// extends, in US dollars.
	Extends uint64  `json:"extends,omitempty"`
	Cost    float64 `json:"cost,omitempty"`
}

// FoldHeading separates a prepared summary from the extractive summary of
// the messages that followed it, when a compaction installs the prepared
// summary and those messages do not fit the retention budget.
const FoldHeading = "## Since this summary was prepared"

// usablePrepared returns the session's prepared summary when a compaction
// can install it: it follows the latest checkpoint and covers at least one
// active message. Called with s.mu held.
func (e *Engine) usablePrepared(s *session) *preparedSummary {
	p := s.prepared
	if p == nil || p.Base != s.lastCheckpointSeq() || p.SnapshotSeq > s.lastMsg {
		return nil
	}
	if len(s.active) == 0 || s.active[0].msg.Seq > p.SnapshotSeq {
		return nil
	}
	return p
}

// preparing reports whether a speculative summary job of the session,
// submitted by this node, is queued or running. Called with s.mu held.
func (s *session) preparing() bool {
	t := s.prepareTicket
	if t == nil {
		return false
	}
	select {
	case <-t.Done():
		s.prepareTicket = nil
		return false
	default:
		return true
	}
}

// tailAfter is the active entries after seq and their tokens,
// uncalibrated. Called with s.mu held.
func (s *session) tailAfter(seq uint64) ([]entry, uint64) {
	for i, en := range s.active {
		if en.msg.Seq > seq {
			var n uint64
			for _, t := range s.active[i:] {
				n += t.tokens
			}
			return s.active[i:], n
		}
	}
	return nil, 0
}

// prepareGate says why the session prepares no summary now ("" when it
// may): the mark is off or not reached, the trigger already fired, or
// compaction could not run (auto off, circuit open, shape server, an
// open tool round). Called with s.mu held.
func (e *Engine) prepareGate(s *session, tokens uint64) string {
	mark := s.cfg.ContextCompaction.PrepareMark(s.limit, s.threshold)
	switch {
	case mark == 0:
		return "speculative summaries are off"
	case !s.cfg.ContextCompaction.Auto:
		return "automatic compaction is off"
	case s.circuitOpen:
		return "circuit open"
	case s.shape == trigger.ShapeServer:
		return "shape server: the provider compacts"
	case s.openRound():
		return "a tool call waits on its result"
	case tokens < mark:
		return fmt.Sprintf("%d tokens is below the prepare mark of %d", tokens, mark)
	case s.cfg.ContextCompaction.PreparePercent == 0 && e.clientPays(s):
		return "the client's credential pays the summarizer: speculative summaries need an explicit prepare_percent"
	}
	return ""
}

// shownPrepareMark is the prepare mark as Info shows it: 0 when the
// session prepares no speculative summary whatever its size. Called with
// s.mu held.
func (e *Engine) shownPrepareMark(s *session) uint64 {
	if s.win.source == WindowUnknown {
		return 0
	}
	if s.cfg.ContextCompaction.PreparePercent == 0 && e.clientPays(s) {
		return 0
	}
	return s.cfg.ContextCompaction.PrepareMark(s.limit, s.threshold)
}

// clientPays reports whether the session's summarizer is paid by its
// client's credential (a proxied session summarizing with its client's
// key), or cannot be called now. Called with s.mu held.
func (e *Engine) clientPays(s *session) bool {
	bindings, _, why := e.sessionBindings(s)
	if why != "" {
		return true
	}
	for _, b := range bindings {
		if b.Credential != nil {
			return true
		}
	}
	return false
}

// prepareDue reports whether the session needs a speculative summary made
// or extended now (the gate passed): none usable yet and something to
// summarize, or a usable one the session outgrew by more than half the
// retention budget. Called with s.mu held.
func (e *Engine) prepareDue(s *session) bool {
	p := e.usablePrepared(s)
	if p == nil {
		return s.newGroupSinceCheckpoint() && e.nothingToCompact(s, trigger.PostCheck) == ""
	}
	_, tail := s.tailAfter(p.SnapshotSeq)
	target := e.retentionTarget(s, s.shape, e.est.Message(preparedMessage(p)))
	return s.calibrate(tail) > target/2
}

// maybePrepare queues a speculative summary job for the session when its
// context reached the prepare mark (below the threshold) and one is due,
// as background work. Called with s.mu held, after a check that did not
// compact.
func (e *Engine) maybePrepare(s *session) {
	if !e.prepareWanted(s) {
		return
	}
	t, err := e.submit(s.id, trigger.Prepare, workers.Background)
	if err != nil {
		e.log.Debug("speculative summary not queued", "session", s.id, "err", err)
		return
	}
	s.prepareTicket = t
}

// prepareWanted reports whether maybePrepare would queue a speculative
// summary job now. Called with s.mu held.
func (e *Engine) prepareWanted(s *session) bool {
	tokens, _ := s.estimate()
	if tokens >= s.threshold || s.compacting || s.preparing() || e.prepareGate(s, tokens) != "" || !e.prepareDue(s) {
		return false
	}
	// Not while a compaction of the session is queued or running.
	return e.opts.Pool.Active(s.id) == nil
}

// preparedMessage is a prepared summary as the summarizer reads it when it
// extends it: the summary message a checkpoint of it would have.
func preparedMessage(p *preparedSummary) history.Message {
	return summaryMessage(checkpoint.Checkpoint{Summary: p.Summary, SummarizedMessages: p.Messages})
}

// runPrepare is one speculative summary job (signal trigger.Prepare).
// When the session is at or above the threshold already — the trigger
// fired before the job started, or while the summary was being made (a
// pre-send or post-check that joined this job waits on it) — it ends
// with the compaction, which installs the summary.
func (e *Engine) runPrepare(ctx context.Context, id string) error {
	s, err := e.lock(ctx, id)
	if err != nil {
		return err
	}
	e.refresh(s)
	tokens, _ := s.estimate()
	if sig := e.compactionAfterPrepare(s, tokens); sig != "" {
		s.mu.Unlock()
		return e.runCompaction(ctx, id, sig)
	}
	if e.prepareGate(s, tokens) != "" || !e.prepareDue(s) {
		s.mu.Unlock()
		return nil
	}
	prev := e.usablePrepared(s)
	p := preparedSummary{Base: s.lastCheckpointSeq(), SnapshotSeq: s.lastMsg, Messages: s.messages, TokensBefore: tokens}
	msgs := s.activeMessages() // the request just sent: its cached prefix
	if prev != nil {
		msgs = e.extensionMessages(s, prev)
		p.Extends, p.Cost = prev.Seq, prev.Cost
	}
	af := s.agentFile
	req := summarizer.Request{
		System:            s.system,
		Tools:             s.tools,
		Messages:          msgs,
		MaxSummaryBytes:   s.cfg.ContextCompaction.MaxSummaryBytes,
		ExtractiveBytes:   s.cfg.Compaction.ExtractiveSummaryBytes,
		Timeout:           config.SummarizerTimeout(af),
		ArtifactReadTools: s.cfg.ContextEditing.ArtifactReadTools,
	}
	if af != nil {
		req.Prompt = af.Prompt
	}
	bindings, fallback, why := e.sessionBindings(s)
	s.mu.Unlock()
	if why != "" {
		e.log.Debug("speculative summary not made", "session", id, "reason", why)
		return nil
	}

	if hook := e.opts.OnSummarizerRequest; hook != nil {
		if m, err := req.Assemble(); err == nil {
			hook(id, m)
		}
	}
	start := time.Now()
	res, err := e.opts.Summarizer.Summarize(ctx, bindings, req, artifactAdapter{e.opts.Artifacts})
	for _, at := range res.Attempts {
		e.metrics.SummarizerCall(at.Binding, at.Duration, at.Err)
	}
	if entries := summarizerEntriesFor(res.Attempts, bindings, e.modeOf(s), ledger.PurposePrepare); len(entries) > 0 {
		if lerr := e.RecordLedger(context.WithoutCancel(ctx), id, entries...); lerr != nil {
			e.log.Warn("summarizer calls not recorded in the ledger", "session", id, "err", lerr)
		}
		for _, en := range entries {
			p.Cost += en.Cost
		}
	}
	if err != nil {
		// Not a failed compaction: the compaction at the trigger runs as
		// it would have without it.
		e.log.Info("speculative summary failed", "session", id, "err", err)
		return nil
	}
	e.log.Debug("speculative summary ready", "session", id, "binding", res.Binding, "elapsed", time.Since(start))

	if s, err = e.lock(ctx, id); err != nil {
		return err
	}
	if s.lastCheckpointSeq() != p.Base {
		// A checkpoint was written meanwhile (a manual compaction): the
		// summary follows an older one and is never used.
		err := e.recordLedgerLocked(context.WithoutCancel(ctx), s, []ledger.Entry{{Kind: ledger.KindPrepared, Outcome: ledger.OutcomeUnused, CoversSeq: p.SnapshotSeq, PreparedCost: p.Cost}})
		sig := e.compactionAfterPrepare(s, tokens)
		s.mu.Unlock()
		if sig != "" {
			return e.runCompaction(ctx, id, sig)
		}
		return err
	}
	p.Summary = trimSummary(res.Summary)
	p.Binding, p.PrunedRetry = res.Binding, res.PrunedRetry
	p.Fallback = fallback != "" && res.Binding == fallback
	data, _ := json.Marshal(p)
	seq, err := e.opts.Log.Append(ctx, id, []checkpoint.Event{{Kind: checkpoint.KindPrepared, Data: data}})
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("storing the speculative summary: %w", mapLogErr(id, err))
	}
	s.lastSeq = max(s.lastSeq, seq)
	p.Seq = seq
	s.prepared = &p
	var entries []ledger.Entry
	if prev != nil {
		entries = append(entries, ledger.Entry{Kind: ledger.KindPrepared, Outcome: ledger.OutcomeExtended, PreparedSeq: prev.Seq, CoversSeq: prev.SnapshotSeq})
	}
	entries = append(entries, ledger.Entry{Kind: ledger.KindPrepared, Outcome: ledger.OutcomeReady, PreparedSeq: seq, CoversSeq: p.SnapshotSeq, PreparedCost: p.Cost})
	if err := e.recordLedgerLocked(context.WithoutCancel(ctx), s, entries); err != nil {
		e.log.Warn("speculative summary not recorded in the ledger", "session", id, "err", err)
	}
	tokens, _ = s.estimate()
	sig := e.compactionAfterPrepare(s, tokens)
	s.mu.Unlock()
	if sig != "" {
		return e.runCompaction(ctx, id, sig)
	}
	return nil
}

// compactionAfterPrepare is the compaction a speculative summary job ends
// with, "" for none: a manual or overflow compaction that joined it
// (afterPrepare), else a pre-send one when the context (tokens) reached
// the threshold — a pre-send or post-check compaction that joined the job
// waits on it. Called with s.mu held; it clears afterPrepare.
func (e *Engine) compactionAfterPrepare(s *session, tokens uint64) trigger.Signal {
	if sig := s.afterPrepare; sig != "" {
		s.afterPrepare = ""
		return sig
	}
	if d, _ := e.decide(s, trigger.PreSend, tokens); d.Compact {
		return trigger.PreSend
	}
	return ""
}

// trimSummary is a summarizer's answer as a checkpoint keeps it: without
// an earlier summary's recall paragraph it copied (each checkpoint writes
// its own), without trailing newlines.
func trimSummary(summary string) string {
	if i := strings.Index(summary, "\n"+summarizer.HeadingFullHistory+"\n"); i >= 0 {
		summary = summary[:i]
	}
	return strings.TrimRight(summary, "\n")
}

// extensionMessages is what the summarizer reads to extend prepared
// summary p: the pinned context and carried first request as the context
// has them, p in place of everything it covers, then the messages after
// it. Called with s.mu held.
func (e *Engine) extensionMessages(s *session, p *preparedSummary) []history.Message {
	tail, _ := s.tailAfter(p.SnapshotSeq)
	out := make([]history.Message, 0, len(tail)+3)
	if len(s.pinned) > 0 {
		out = append(out, pinnedMessage(s.pinned))
	}
	if s.firstPinned != nil {
		out = append(out, s.firstPinned.msg)
	}
	out = append(out, preparedMessage(p))
	for _, en := range tail {
		out = append(out, s.renderEntry(en))
	}
	return out
}

// sessionBindings are the summarizer bindings a compaction of the session
// tries and the name of the implicit fallback among them ("" for none), as
// runCompaction chooses them; why says why none can be called now ("" when
// they can). Called with s.mu held.
func (e *Engine) sessionBindings(s *session) (bindings []config.Binding, fallback, why string) {
	if s.agentErr != nil {
		return nil, "", s.agentErr.Error()
	}
	bindings, fallback = withFallback(s.cfg.SummarizerBindings(), s.cfg.Compaction.Fallback)
	if s.missingBinding != "" {
		if s.cfg.Compaction.Fallback == config.FallbackNone {
			return nil, "", fmt.Sprintf("summarizer binding %q is no longer configured", s.missingBinding)
		}
		bindings = []config.Binding{{Name: FallbackBinding, Provider: config.ProviderExtractive}}
		fallback = FallbackBinding
	}
	if fn := e.bindings.Load(); fn != nil {
		own, ok, err := (*fn)(s.id, s.meta.Labels)
		if err != nil {
			return nil, "", err.Error()
		}
		if ok {
			bindings, fallback = withFallback(own, s.cfg.Compaction.Fallback)
		}
	}
	return bindings, fallback, ""
}

// install is what a compaction takes from a prepared summary instead of a
// summarizer call.
type install struct {
	prep    *preparedSummary
	summary string
	// seq and messages are the snapshot the checkpoint covers (the
	// prepared one, or every message when the new part was folded), raw
	// its active entries.
	seq, messages uint64
	raw           []entry
	// tail is what follows the snapshot verbatim, calibrated tokens: the
	// retention budget left for messages inside it.
	tail   uint64
	folded bool
}

// installable returns what a compaction by sig installs from the
// session's prepared summary, nil when there is none it can install. The
// messages after the prepared snapshot follow the summary verbatim when
// they fit the retention budget (half of it for an overflow, none for a
// deeper overflow); else they are folded: the checkpoint covers every
// message, and its summary is the prepared one followed by FoldHeading and
// an extractive summary of the new part — fast, local, never a second
// summary of what the prepared one covers, which is kept whole. nil also
// when the fold would not fit max_summary_bytes. Called with s.mu held.
func (e *Engine) installable(s *session, sig trigger.Signal, deep bool) *install {
	p := e.usablePrepared(s)
	if p == nil {
		return nil
	}
	tail, tailTokens := s.tailAfter(p.SnapshotSeq)
	in := &install{prep: p, summary: p.Summary, seq: p.SnapshotSeq, messages: p.Messages, tail: s.calibrate(tailTokens)}
	for _, en := range s.active {
		if en.msg.Seq <= p.SnapshotSeq {
			in.raw = append(in.raw, en)
		}
	}
	target := e.retentionTarget(s, s.shape, e.est.Message(preparedMessage(p)))
	switch {
	case deep:
		target = 0
	case sig == trigger.Overflow:
		target /= 2
	}
	if len(tail) == 0 || in.tail <= target {
		return in
	}
	msgs := make([]history.Message, len(tail))
	for i, en := range tail {
		msgs[i] = s.renderEntry(en)
	}
	folded, ok := foldSummary(p.Summary, msgs, s.cfg.Compaction.ExtractiveSummaryBytes, s.cfg.ContextCompaction.MaxSummaryBytes)
	if !ok {
		return nil
	}
	in.summary = folded
	in.seq, in.messages = s.lastMsg, s.messages
	in.raw = append([]entry(nil), s.active...)
	in.tail, in.folded = 0, true
	return in
}

// foldSummary is prepared followed by FoldHeading and the extractive
// summary of newPart (the messages after the prepared snapshot, as sent),
// within extractiveBytes and the room max_summary_bytes (maxBytes) leaves;
// ok false when that room is under minFoldBytes.
func foldSummary(prepared string, newPart []history.Message, extractiveBytes, maxBytes uint64) (string, bool) {
	sep := "\n\n" + FoldHeading + "\n\n"
	room := int(maxBytes) - len(prepared) - len(sep)
	budget := min(int(extractiveBytes), room)
	if budget < minFoldBytes {
		return "", false
	}
	return prepared + sep + summarizer.ExtractiveSummary(newPart, uint64(budget)), true
}

// minFoldBytes is the least room a fold's extractive summary needs.
const minFoldBytes = 512

// preparedOutcome records what a written checkpoint did with the
// session's prepared summary: used (in) or, when one was usable before
// it and in is nil, never used. Called with s.mu held, after the
// checkpoint was applied; base is the checkpoint seq before it.
func (e *Engine) preparedOutcome(ctx context.Context, s *session, in *install, base uint64) {
	p := s.prepared
	var en ledger.Entry
	switch {
	case in != nil:
		en = ledger.Entry{Kind: ledger.KindPrepared, Outcome: ledger.OutcomeUsed, PreparedSeq: in.prep.Seq, CoversSeq: in.prep.SnapshotSeq, PreparedCost: in.prep.Cost}
	case p != nil && p.Base == base:
		en = ledger.Entry{Kind: ledger.KindPrepared, Outcome: ledger.OutcomeUnused, PreparedSeq: p.Seq, CoversSeq: p.SnapshotSeq, PreparedCost: p.Cost}
	default:
		return
	}
	s.prepared = nil
	if err := e.recordLedgerLocked(context.WithoutCancel(ctx), s, []ledger.Entry{en}); err != nil {
		e.log.Warn("speculative summary's outcome not recorded in the ledger", "session", s.id, "err", err)
	}
}

// submitCheck queues the compaction a post-check decided (signal sig).
// When session s's speculative summary job is queued or running, the
// submit joins it, and the job ends with the compaction
// (compactionAfterPrepare reads afterPrepare) — unless it made its last
// check before the join (its summary stored, the job ending): then the
// compaction is queued again once the job has ended. Called with s.mu
// held.
func (e *Engine) submitCheck(s *session, sig trigger.Signal, prio workers.Priority) (*workers.Ticket, error) {
	joining := s.preparing()
	if joining && s.afterPrepare == "" {
		s.afterPrepare = sig
	}
	t, err := e.submit(s.id, sig, prio)
	if err == nil && joining && t.Joined {
		go e.compactAfterJoin(s.id, sig, prio, t)
	}
	return t, err
}

// compactAfterJoin waits for the speculative summary job t that a check's
// compaction (sig) joined, and queues that compaction when the job ended
// without taking it (afterPrepare still sig).
func (e *Engine) compactAfterJoin(id string, sig trigger.Signal, prio workers.Priority, t *workers.Ticket) {
	<-t.Done()
	s, err := e.lock(context.Background(), id)
	if err != nil {
		return // deleted or shut down meanwhile
	}
	defer s.mu.Unlock()
	if s.afterPrepare != sig || s.preparing() {
		return
	}
	s.afterPrepare = ""
	if _, err := e.submit(id, sig, prio); err != nil {
		e.log.Warn("compaction after a speculative summary not queued", "session", id, "err", err)
	}
}
