package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/offload"
	"github.com/ctxd/ctxd/recall"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/workers"
)

// CircuitFailures is how many consecutive failed compactions in a run open
// the circuit (docs/design.md §5.5).
const CircuitFailures = 3

// ErrOpenRound: a compaction was asked for while a tool call waits on its
// result; its message is exactly trigger.NotCompactingOpenRound
// (docs/design.md §5.1).
var ErrOpenRound error = api.NewCoded(api.Conflict, trigger.NotCompactingOpenRound).Under(ErrConflict).Answer(func(error) *api.Error {
	return &api.Error{Code: api.Conflict, Message: trigger.NotCompactingOpenRound}
})

// ErrNothingToCompact: the session has no message a summary could replace.
// It is an answer, not a failure: it never counts toward the circuit
// (docs/design.md §5.2). The error's text after NothingToCompactReason says why.
var ErrNothingToCompact = fmt.Errorf("%w: nothing to compact", ErrConflict)

// ErrStalled: a compaction wrote its checkpoint but left the context at or
// above the threshold (docs/design.md §5.5); the checkpoint stands.
var ErrStalled = fmt.Errorf("%w: compaction stalled", ErrConflict)

func nothingErr(why string) error { return fmt.Errorf("%w: %s", ErrNothingToCompact, why) }

// NothingToCompactReason returns why err (wrapping ErrNothingToCompact)
// found nothing to compact, in words for an operator; "" for another error.
func NothingToCompactReason(err error) string {
	if !errors.Is(err, ErrNothingToCompact) {
		return ""
	}
	msg := err.Error()
	if i := strings.Index(msg, ErrNothingToCompact.Error()+": "); i >= 0 {
		return msg[i+len(ErrNothingToCompact.Error())+2:]
	}
	return "nothing to compact"
}

// nothingToCompact returns why a compaction asked for by sig would replace
// nothing, or "" when it would (docs/design.md §5.1, §5.2): the session has no
// message; nothing was appended since the last checkpoint (manual; an
// overflow may still cut into the retained messages); the active history is
// the current request alone, which is kept verbatim — a request that fits
// the window is sent whole, never replaced by a summary of itself; or every
// message since the last checkpoint would be retained (estimated with the
// previous summary's size), so the summary would only restate the last
// one — for an overflow, whose retention cuts into the tail
// (retainedStart), every message but those carried beside the summary.
// Checked before the summarizer is called. Called with s.mu held.
func (e *Engine) nothingToCompact(s *session, sig trigger.Signal) string {
	switch {
	case len(s.active) == 0 && s.cp == nil:
		return "the session has no messages yet"
	case len(s.active) == 0:
		return "no message since the last checkpoint"
	case sig == trigger.Manual && !s.newGroupSinceCheckpoint():
		return "no message since the last checkpoint"
	}
	if req := s.currentRequest(); req != nil && len(s.active) == 1 && s.active[0].msg.Seq == req.msg.Seq {
		return "the session holds only the current request, which compaction keeps verbatim"
	}
	if e.allRetained(s, sig) {
		if sig == trigger.Overflow {
			return "every message since the last checkpoint is a request compaction carries beside the summary (the current or the first request)"
		}
		return fmt.Sprintf("every message since the last checkpoint fits in the retention budget of %d tokens (keep_recent_tokens)", e.retentionTarget(s, s.shape, s.summaryTokens))
	}
	return ""
}

// retainedStart is trigger.RetainedStart for a compaction by sig over msgs.
// An overflow compaction follows the provider's word that the prompt is
// too long over ctxd's estimate, so retention may not block it: it keeps at
// most half the budget, and never so much that the summary would replace
// nothing — it summarizes at least the oldest group holding a message that
// is not carried beside the summary (carried: the current and the first
// request, docs/design.md §5.2). docs/design.md §10 overflow recovery;
// docs/decisions.md "An overflow compaction cuts into the retained tail".
func retainedStart(sig trigger.Signal, msgs []history.Message, tokens []uint64, target uint64, carried func(seq uint64) bool) int {
	groups := history.Groups(msgs).Groups
	if sig != trigger.Overflow {
		return trigger.RetainedStart(groups, tokens, target)
	}
	start := trigger.RetainedStart(groups, tokens, target/2)
	summarizes := func(end int) bool {
		for _, m := range msgs[:end] {
			if !carried(m.Seq) {
				return true
			}
		}
		return false
	}
	for _, g := range groups {
		if summarizes(start) {
			return start
		}
		if g.End > start && summarizes(g.End) {
			return g.End
		}
	}
	return start
}

// carriedFn reports whether a message seq is carried beside a summary
// rather than summarized: the current request, and the first request with
// keep_first_request (docs/design.md §5.2). Called with s.mu held.
func (e *Engine) carriedFn(s *session) func(uint64) bool {
	var req, first uint64
	if r := s.currentRequest(); r != nil {
		req = r.msg.Seq
	}
	if s.cfg.Compaction.KeepFirstRequest && s.first != nil {
		first = s.first.msg.Seq
	}
	return func(seq uint64) bool { return seq != 0 && (seq == req || seq == first) }
}

// currentRequest is the user prompt that opened the current run, when the
// active history or the latest checkpoint still carries it; nil otherwise.
func (s *session) currentRequest() *entry {
	if s.req == nil {
		return nil
	}
	if s.keptReq != nil && s.keptReq.msg.Seq == s.req.msg.Seq {
		return s.req
	}
	if len(s.active) > 0 && s.active[0].msg.Seq <= s.req.msg.Seq {
		return s.req
	}
	return nil
}

// retentionTarget is the retention budget (docs/design.md §5.2) of a compaction
// of shape whose summary has summaryTokens (uncalibrated), with the current
// request and the first request counted as fixed content beside it.
// Calibrated.
func (e *Engine) retentionTarget(s *session, shape string, summaryTokens uint64) uint64 {
	fixed := s.fixedTokens + summaryTokens + e.carriedEstimate(s)
	return trigger.Retention{
		KeepRecentTokens: s.cfg.ContextCompaction.KeepRecentTokens,
		ContextLimit:     s.limit,
		FixedTokens:      s.calibrate(fixed),
		Shape:            shape,
	}.Target()
}

// carriedEstimate is what the requests a compaction carries outside the
// summary will take (docs/design.md §5.2), uncalibrated: the current request
// (about config.FirstRequestMaxTokens when it cannot fit the window and is
// carried bounded) and, with keep_first_request, the first one, at most
// about config.FirstRequestMaxTokens. Called with s.mu held.
func (e *Engine) carriedEstimate(s *session) uint64 {
	var n uint64
	req := s.currentRequest()
	switch {
	case req == nil:
	case s.calibrate(s.fixedTokens+req.tokens) > s.limit:
		// Too long for the window: carried as its head and tail (carry).
		n += min(req.tokens, config.FirstRequestMaxTokens)
	default:
		n += req.tokens
	}
	if s.firstPinned != nil {
		n += s.firstPinned.tokens
	} else if s.cfg.Compaction.KeepFirstRequest && s.first != nil && (req == nil || s.first.msg.Seq != req.msg.Seq) {
		n += min(s.first.tokens, config.FirstRequestMaxTokens)
	}
	return n
}

// allRetained reports whether the retention of a compaction by sig would
// keep every active message (so a summary would replace nothing new), with
// the previous summary's size standing in for the new one's. Called with
// s.mu held.
func (e *Engine) allRetained(s *session, sig trigger.Signal) bool {
	target := e.retentionTarget(s, s.shape, s.summaryTokens)
	msgs := make([]history.Message, len(s.active))
	toks := make([]uint64, len(s.active))
	for i, en := range s.active {
		msgs[i] = en.msg
		toks[i] = s.calibrate(en.tokens)
	}
	carried := e.carriedFn(s)
	start := retainedStart(sig, msgs, toks, target, carried)
	if sig != trigger.Overflow {
		return start == 0
	}
	for _, m := range msgs[:start] {
		if !carried(m.Seq) {
			return false
		}
	}
	return true
}

// CompactResult is the outcome of a compaction request.
type CompactResult struct {
	// Queued: the compaction runs in the background (no wait).
	Queued bool
	// Joined: a compaction of the session was already queued or running
	// and this request joined it (docs/design.md §8a).
	Joined bool
	// Checkpoint is the checkpoint written, when waited for.
	Checkpoint *checkpoint.Checkpoint
}

// Compact compacts session id now (docs/design.md §5, §7 POST compact). reason is
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
	d := e.check(ctx, s, reason)
	if d.Compact {
		if why := e.nothingToCompact(s, reason); why != "" {
			// "Nothing to compact" is an answer, not a failure: it never
			// counts toward the circuit (docs/design.md §5.2).
			s.lastCheck.Fired, s.lastCheck.Reason = false, "nothing to compact: "+why
			s.mu.Unlock()
			return CompactResult{}, nothingErr(why)
		}
	}
	before := s.lastCheckpointSeq()
	open := s.openRound()
	if d.Compact && s.preparing() {
		// The submit below joins the speculative summary job: it ends with
		// this compaction (runPrepare).
		s.afterPrepare = reason
	}
	s.mu.Unlock()
	if !d.Compact {
		if open {
			return CompactResult{}, ErrOpenRound
		}
		return CompactResult{}, fmt.Errorf("%w: %s", ErrConflict, d.Reason)
	}
	prio := workers.Background
	if wait {
		prio = workers.Waited
	}
	t, err := e.submit(id, reason, prio)
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
	if s.afterPrepare == reason && !s.preparing() && s.lastCheckpointSeq() == before {
		// The speculative summary job this compaction joined had made its
		// last check before the join (its summary stored, the job
		// ending): nobody ran the compaction asked for, so it runs now.
		s.afterPrepare = ""
		s.mu.Unlock()
		if t, err = e.submit(id, reason, prio); err != nil {
			return res, err
		}
		if err := t.Wait(ctx); err != nil {
			return res, err
		}
		if s, err = e.lock(ctx, id); err != nil {
			return res, err
		}
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
	err := t.Wait(ctx)
	if errors.Is(err, workers.ErrYielded) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

func (s *session) lastCheckpointSeq() uint64 {
	if s.cp == nil {
		return 0
	}
	return s.cp.Seq
}

// submit queues a compaction of the session in the worker pool, or joins the
// one queued or running. prio is workers.Waited when a request waits on the
// result (a pre-send check, wait=true): it then starts before background
// compactions and takes over the session's queued one.
// Errors: ErrUnavailable.
func (e *Engine) submit(id string, sig trigger.Signal, prio workers.Priority) (*workers.Ticket, error) {
	var t *workers.Ticket
	var err error
	if q, ok := e.opts.Pool.(SharedQueue); ok {
		t, err = q.SubmitJob(id, string(sig), prio, e.job(id, sig))
	} else {
		t, err = e.opts.Pool.SubmitPriority(id, prio, e.job(id, sig))
	}
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

// job is the work of one compaction job of session id.
func (e *Engine) job(id string, sig trigger.Signal) workers.Func {
	return func(ctx context.Context) error {
		var err error
		if sig == trigger.Prepare {
			err = e.runPrepare(ctx, id)
		} else {
			err = e.runCompaction(ctx, id, sig)
		}
		e.saveRowOf(ctx, id)
		return err
	}
}

// FallbackBinding is the name of the implicit last binding that
// [compaction] fallback = "extractive" adds (docs/design.md §5.5).
const FallbackBinding = "extractive-fallback"

// withFallback returns the bindings a compaction tries: the configured ones
// (none: the embedded extractive summarizer alone), then, with fallback
// "extractive" and a list not already ending in an extractive binding, the
// implicit FallbackBinding. The second result is the fallback binding's
// name, "" when none was added.
func withFallback(bindings []config.Binding, fallback string) ([]config.Binding, string) {
	if len(bindings) == 0 {
		return summarizer.DefaultBindings(), ""
	}
	if fallback == config.FallbackNone || bindings[len(bindings)-1].Provider == config.ProviderExtractive {
		return bindings, ""
	}
	out := append(slices.Clip(bindings), config.Binding{Name: FallbackBinding, Provider: config.ProviderExtractive})
	return out, FallbackBinding
}

// carry decides what a checkpoint that keeps the messages from seq
// keepFrom on carries outside its summary (docs/design.md §5.2): the current
// request, verbatim (or bounded when it alone cannot fit the window beside
// the fixed prefix and the summary), and, with keep_first_request, the
// session's first request, verbatim up to config.FirstRequestMaxTokens
// tokens, else its head and tail with the artifact URI of the whole.
// Neither when retained, and the first request not when it is the current
// one. Called with s.mu held.
func (e *Engine) carry(ctx context.Context, s *session, keepFrom, summaryTokens uint64) (req, first *checkpoint.Carried) {
	if r := s.currentRequest(); r != nil && r.msg.Seq < keepFrom {
		req = &checkpoint.Carried{Seq: r.msg.Seq}
		if s.calibrate(s.fixedTokens+summaryTokens+r.tokens) > s.limit {
			req.Stub = e.boundedRequest(ctx, s, r.msg, "current request")
		}
	}
	f := s.first
	if !s.cfg.Compaction.KeepFirstRequest || f == nil || f.msg.Seq >= keepFrom || (req != nil && req.Seq == f.msg.Seq) {
		return req, nil
	}
	if s.firstPinned != nil && s.firstPinned.msg.Seq == f.msg.Seq && s.cp != nil && s.cp.FirstRequest != nil {
		c := *s.cp.FirstRequest
		return req, &c
	}
	first = &checkpoint.Carried{Seq: f.msg.Seq}
	if s.calibrate(f.tokens) > config.FirstRequestMaxTokens {
		first.Stub = e.boundedRequest(ctx, s, f.msg, "first request")
	}
	return req, first
}

// Head and tail, in characters, of a request too long to carry verbatim:
// together about 1,500 tokens of prose, under config.FirstRequestMaxTokens.
const (
	requestHeadChars = 4000
	requestTailChars = 2000
)

// boundedRequest is the text a request too long to carry verbatim is sent
// as: a header naming what it is, its size and the artifact URI of its
// whole text, then its head and tail. Same message, same bytes.
func (e *Engine) boundedRequest(ctx context.Context, s *session, m history.Message, what string) string {
	var parts []string
	for _, b := range m.Content {
		if b.Type == history.BlockText {
			parts = append(parts, b.Text)
		}
	}
	text := strings.Join(parts, "\n")
	chars := uint64(utf8.RuneCountInString(text))
	where := "it could not be stored"
	if e.opts.Artifacts != nil {
		if id, err := e.opts.Artifacts.Retain(ctx, []byte(text), artifacts.FormatText); err == nil {
			where = "the whole text is " + id.URI()
		} else {
			e.log.Warn("storing a long request as an artifact", "session", s.id, "err", err)
		}
	}
	head := offload.Head(text, requestHeadChars)
	tail := offload.Tail(text, min(requestTailChars, chars-uint64(utf8.RuneCountInString(head))))
	omitted := chars - uint64(utf8.RuneCountInString(head)) - uint64(utf8.RuneCountInString(tail))
	return fmt.Sprintf("[ctxd kept the %s of this session (message %d, %d characters) in part; %s. Its beginning and end:]\n%s\n[… %d characters omitted …]\n%s",
		what, m.Seq, chars, where, head, omitted, tail)
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
	if _, fleet := e.opts.Pool.(SharedQueue); fleet && ctx.Err() != nil {
		return e.handBackLocked(ctx, s, sig, cause)
	}
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

// handBackLocked records a compaction this node stopped running because it
// is shutting down, with a SharedQueue (docs/design.md §9): the queue hands the
// job back and another node runs it, so it is no failure of the session's
// run (not counted, no circuit); the event says so (reason "handback"), or
// an event stream would show it running forever.
func (e *Engine) handBackLocked(ctx context.Context, s *session, sig trigger.Signal, cause error) error {
	d, _ := json.Marshal(map[string]any{"reason": "handback", "signal": sig,
		"message": "this node stopped during the compaction and handed the job back to the fleet's queue; another node runs it (" + cause.Error() + ")"})
	if seq, err := e.opts.Log.Append(context.WithoutCancel(ctx), s.id, []checkpoint.Event{{Kind: checkpoint.KindCompactionFailed, Data: d}}); err == nil {
		s.lastSeq = max(s.lastSeq, seq)
	} else {
		e.log.Warn("recording a compaction handback", "session", s.id, "err", err)
	}
	e.log.Info("compaction handed back: this node is stopping", "session", s.id, "signal", string(sig))
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

// writeRecall writes the recall file of a checkpoint replacing the entries
// replaced (docs/design.md §5.6 "Recall"): their full text, offloaded
// results whole, in dir (the session's offload directory, or dirErr why
// there is none), before the checkpoint is written. It returns the footer
// the summary ends with: the file's path and how to search it, or that the
// history is not available as a file when it could not be written — a
// failed write changes nothing else. Called with s.mu held.
func (e *Engine) writeRecall(s *session, replaced []entry, dir string, dirErr error) string {
	if len(replaced) == 0 {
		return recall.Unavailable
	}
	if dirErr != nil {
		e.log.Warn("recall file not written", "session", s.id, "err", dirErr)
		return recall.Unavailable
	}
	first, last := replaced[0].msg.Seq, replaced[len(replaced)-1].msg.Seq
	var buf bytes.Buffer
	buf.WriteString(recall.Header(s.id, first, last, time.Now()))
	full := func(callID string) (string, bool) {
		path, ok := s.offloads[callID]
		if !ok || path == "" {
			return "", false
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	for _, en := range replaced {
		recall.RenderMessage(&buf, en.msg, full)
	}
	path, err := s.offloader.WriteFile(s.id, recall.FileName(first, last), buf.String())
	if err != nil {
		e.log.Warn("recall file not written", "session", s.id, "err", err)
		return recall.Unavailable
	}
	return recall.Footer(path, dir, first, last)
}
