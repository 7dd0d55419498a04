package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/accuracy"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/transcript"
)

// Compaction is one compaction ctxd made during a replay.
type Compaction struct {
	// BeforeResponse is the number of assistant responses (after merging,
	// from 0) before which the compaction took effect.
	BeforeResponse int `json:"before_response"`
	// Signal is "pre-send" or "post-check".
	Signal           string `json:"signal"`
	TokensBefore     uint64 `json:"tokens_before"`
	TokensAfter      uint64 `json:"tokens_after"`
	RetainedMessages int    `json:"retained_messages"`
	SummaryBytes     uint64 `json:"summary_bytes"`
	Binding          string `json:"binding"`
	PrunedRetry      bool   `json:"pruned_retry"`
	Stalled          bool   `json:"stalled"`
}

// OriginalCompaction is a compaction the original agent made, from the
// transcript.
type OriginalCompaction struct {
	BeforeResponse int    `json:"before_response"`
	PreTokens      uint64 `json:"pre_tokens"`
}

// ErrorStats summarizes relative errors: p50 and p90 of |error|.
type ErrorStats struct {
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	Samples int     `json:"samples"`
	// Bias is the median signed error (negative: ctxd undercounts).
	Bias float64 `json:"bias"`
}

// Report is the result of a replay: the `ctxctl replay --json` object
// (docs/cli.md).
type Report struct {
	Format              string               `json:"format"`
	Responses           int                  `json:"responses"`
	Messages            int                  `json:"messages"`
	ToolCalls           int                  `json:"tool_calls"`
	ContextLimit        uint64               `json:"context_limit"`
	Threshold           uint64               `json:"threshold"`
	Compactions         []Compaction         `json:"compactions"`
	OriginalCompactions []OriginalCompaction `json:"original_compactions"`
	ContextEditPasses   int                  `json:"context_edit_passes"`
	// ContextEditDeferred counts the appends at which a context-edit pass
	// was planned and deferred because its savings before the next
	// compaction would not pay for its cache rewrite (docs/design.md §6).
	ContextEditDeferred uint64 `json:"context_edit_deferred,omitempty"`
	// ContextEditCharsSaved is the characters (code points) the recorded
	// passes removed; OffloadTokensSaved the uncalibrated tokens offload
	// stubs saved against the original results.
	ContextEditCharsSaved uint64 `json:"context_edit_chars_saved"`
	OffloadTokensSaved    uint64 `json:"offload_tokens_saved"`
	Offloads              int    `json:"offloads"`
	AbandonedRounds       int    `json:"abandoned_rounds"`
	// TrailingCalls is the number of tool calls the file ended with, with
	// no result after them; they are left out (transcript.TrailingCalls),
	// so they are not unanswered calls. CutLine is the JSONL line cut short
	// at the end of the file and skipped, 0 for none.
	TrailingCalls int `json:"trailing_calls"`
	CutLine       int `json:"cut_line,omitempty"`
	// EstimateError compares each pre-send estimate with the next recorded
	// usage (lowered by what ctxd's own layers removed), before the first
	// compaction: (estimate − recorded) / recorded.
	EstimateError ErrorStats `json:"estimate_error"`
	// GrowthError is |relative error| of the estimated growth between two
	// consecutive responses, for growths over 500 tokens (internal/accuracy).
	GrowthError ErrorStats `json:"growth_error"`
	// NonAppendRequests counts assembled requests that are not a byte
	// extension of the previous one; RecordedRewrites counts requests
	// preceded by a recorded rewrite (a checkpoint, a context-edit pass, a
	// prefix reset). They are equal when every rewrite is recorded.
	NonAppendRequests int `json:"non_append_requests"`
	RecordedRewrites  int `json:"recorded_rewrites"`
	// OrphanToolResults and UnansweredToolCalls count what appeared in any
	// request ctxd assembled, summarizer requests included: always 0.
	OrphanToolResults   int `json:"orphan_tool_results"`
	UnansweredToolCalls int `json:"unanswered_tool_calls"`
	// ProviderRuleViolations counts the violations of a provider rule
	// (history.CheckRequest, docs/design.md §4a) in those requests: always 0;
	// Violations lists the first MaxViolations of them, each naming the
	// response before which it was found.
	ProviderRuleViolations int      `json:"provider_rule_violations"`
	Violations             []string `json:"violations,omitempty"`
	// FinalTokens is the estimate of the context at the end, in tokens.
	FinalTokens uint64 `json:"final_tokens"`
	// Cost is the session's cost without ctxd and with it.
	Cost Cost `json:"cost"`
	// Speculative is what became of the speculative summaries the replay
	// prepared (docs/design.md §5.1).
	Speculative Speculative `json:"speculative"`
}

// Speculative counts the replay's speculative summaries by outcome (the
// ledger's prepared entries): Made, of which Used installed by a
// compaction, Extended by a later one, Unused never (a compaction made
// without it), Pending still waiting for the trigger when the transcript
// ended. PreparedTokens is the context each was prepared from, summed:
// what a summarizer call read for them; UnusedTokens that of the unused
// and pending ones.
type Speculative struct {
	Made           uint64 `json:"made"`
	Used           uint64 `json:"used"`
	Extended       uint64 `json:"extended"`
	Unused         uint64 `json:"unused"`
	Pending        uint64 `json:"pending"`
	PreparedTokens uint64 `json:"prepared_tokens"`
	UnusedTokens   uint64 `json:"unused_tokens"`
}

// MaxViolations bounds Report.Violations.
const MaxViolations = 10

// Run replays tr. tr is not modified.
// Errors: ErrNoContextLimit, the engine's (a transcript that fails
// validation names the message).
func Run(ctx context.Context, tr *transcript.Transcript, opts Options) (*Report, error) {
	cfg := opts.Config
	r := &Report{
		Format:              tr.Format,
		Responses:           tr.Responses,
		Messages:            len(tr.Messages),
		ToolCalls:           tr.ToolCalls,
		Compactions:         []Compaction{},
		OriginalCompactions: []OriginalCompaction{},
		TrailingCalls:       len(tr.TrailingCalls),
		CutLine:             tr.CutLine,
	}
	for _, oc := range tr.OriginalCompactions {
		r.OriginalCompactions = append(r.OriginalCompactions, OriginalCompaction{BeforeResponse: oc.BeforeResponse, PreTokens: oc.PreTokens})
	}

	var mu sync.Mutex // the summarizer hook runs in the pool's goroutine
	check := func(msgs []history.Message, rules history.Rules, where string) {
		a := history.Groups(msgs)
		vs := history.CheckRequest(history.Sendable(msgs), rules)
		mu.Lock()
		r.OrphanToolResults += len(a.Orphans)
		r.UnansweredToolCalls += len(a.Unanswered)
		r.ProviderRuleViolations += len(vs)
		for _, v := range vs {
			if len(r.Violations) < MaxViolations {
				r.Violations = append(r.Violations, where+": "+v.Error())
			}
		}
		mu.Unlock()
	}
	env, info, err := openSession(ctx, cfg, tr, opts, func(_ string, msgs []history.Message) {
		// The summarizer's request ends with the compaction prompt, a user
		// message: any call still open before it is unanswered.
		check(msgs, history.Rules{}, "summarizer request")
	})
	if err != nil {
		return nil, err
	}
	defer env.Close()
	e := env.Engine
	r.ContextLimit, r.Threshold = info.ContextLimit, info.Threshold

	rp := &run{e: e, r: r, opts: opts, check: check, firstOriginal: math.MaxInt, cost: newCostRun(cfg, info.Model)}
	if len(tr.OriginalCompactions) > 0 {
		rp.firstOriginal = tr.OriginalCompactions[0].BeforeResponse
	}
	origAt := map[int][]transcript.OriginalCompaction{}
	for _, oc := range tr.OriginalCompactions {
		origAt[oc.MessageIndex] = append(origAt[oc.MessageIndex], oc)
	}

	msgs := tr.Messages
	response := 0
	for i := 0; i < len(msgs); {
		for _, oc := range origAt[i] {
			rp.step(oc.BeforeResponse, "original_compaction", fmt.Sprintf("the original agent compacted at %d tokens", oc.PreTokens))
		}
		if msgs[i].Role == history.RoleAssistant {
			if err := rp.response(ctx, response, msgs[i]); err != nil {
				return nil, fmt.Errorf("response %d (message %d): %w", response, i, err)
			}
			response++
			i++
		} else {
			j := i
			for j < len(msgs) && msgs[j].Role != history.RoleAssistant {
				j++
			}
			if err := rp.appendBatch(ctx, response, msgs[i:j]); err != nil {
				return nil, fmt.Errorf("messages %d–%d: %w", i, j-1, err)
			}
			i = j
		}
		if opts.Progress != nil {
			opts.Progress(i, len(msgs))
		}
	}
	// The context the agent would send next.
	a, err := e.Context(ctx, SessionID, engine.ContextOptions{Unchecked: true})
	if err != nil {
		return nil, err
	}
	rp.request(a, response)

	final, err := e.Session(ctx, SessionID)
	if err != nil {
		return nil, err
	}
	r.FinalTokens = final.Tokens
	r.Cost = rp.cost.finish(ctx, e)
	r.Speculative = speculative(ctx, e)
	r.ContextEditPasses = final.ContextEditPasses
	if final.Rewrites != nil {
		r.ContextEditDeferred = final.Rewrites.DeferredPasses
	}
	r.Offloads = final.Offloads
	r.OffloadTokensSaved = rp.offloadSaved
	r.EstimateError = stats(rp.estimateErrs)
	g := accuracy.Summarize(accuracy.GrowthPairs(tr, history.Estimator{}, accuracy.Method{Factor: modelFactor(cfg, tr.Model), Online: true, ReportedOutput: true}))
	r.GrowthError = ErrorStats{P50: round(g.P50), P90: round(g.P90), Samples: g.Pairs, Bias: round(g.Bias)}
	return r, nil
}

// run is the state of one replay.
type run struct {
	e     *engine.Engine
	r     *Report
	opts  Options
	check func(msgs []history.Message, rules history.Rules, where string)

	prev          *engine.Assembled // the previous assembled request
	prevEnc       [][]byte
	cpSeen        uint64 // newest checkpoint reported
	compacted     bool   // ctxd compacted at least once
	firstOriginal int    // response before which the original agent first compacted
	offloadSaved  uint64 // uncalibrated tokens offloads removed
	estimateErrs  []float64
	cost          *costRun
}

func (rp *run) step(response int, kind, text string) {
	if rp.opts.Timeline != nil {
		rp.opts.Timeline(Step{Response: response, Kind: kind, Text: text})
	}
}

// response replays one assistant response: the pre-send check, then the
// response with its recorded usage (the post-check).
func (rp *run) response(ctx context.Context, k int, m history.Message) error {
	a, err := rp.e.Context(ctx, SessionID, engine.ContextOptions{Unchecked: true})
	if err != nil {
		return err
	}
	if a.Diagnostic != "" {
		rp.step(k, "diagnostic", a.Diagnostic)
	}
	if a.Compacted {
		if err := rp.newCheckpoints(ctx, k, "pre-send", a); err != nil {
			return err
		}
	}
	rp.request(a, k)
	var output uint64
	if m.Usage != nil {
		output = m.Usage.OutputTokens
	}
	rp.cost.request(ctx, rp.e, a, output)
	rp.cost.add(m)

	m.Seq, m.Tokens = 0, 0
	usable := !rp.compacted && k < rp.firstOriginal
	if m.Usage != nil {
		if usable {
			u, recorded := rp.lowered(ctx, *m.Usage)
			m.Usage = &u
			if recorded > 0 {
				rp.estimateErrs = append(rp.estimateErrs, (float64(a.Tokens)-float64(recorded))/float64(recorded))
			}
		} else {
			// Recorded usage describes a context that no longer exists (ctxd or
			// the original agent compacted it): the calibrated estimate stands.
			m.Usage = nil
		}
	}
	res, err := rp.e.Append(ctx, SessionID, []history.Message{m})
	if err != nil {
		return err
	}
	if res.CompactionQueued {
		if err := rp.e.WaitCompaction(ctx, SessionID); err != nil {
			rp.step(k+1, "diagnostic", "post-check compaction failed: "+err.Error())
		}
		after, err := rp.e.Context(ctx, SessionID, engine.ContextOptions{NoPreSend: true, Unchecked: true})
		if err != nil {
			return err
		}
		return rp.newCheckpoints(ctx, k+1, "post-check", after)
	}
	// A speculative summary being prepared in the background: the replay
	// waits for it, as the agent's own turn would take longer than the
	// summarizer, so that its figures never depend on scheduling (a
	// pre-send check that finds the summary still being made serves the
	// context uncompacted).
	if err := rp.e.WaitCompaction(ctx, SessionID); err != nil {
		rp.step(k+1, "diagnostic", "speculative summary failed: "+err.Error())
	}
	if a.DiagnosticCode == api.DiagSummaryPreparing {
		// The pre-send check served the context and compacted in the
		// background: the checkpoint it wrote counts from here.
		after, err := rp.e.Context(ctx, SessionID, engine.ContextOptions{NoPreSend: true, Unchecked: true})
		if err != nil {
			return err
		}
		return rp.newCheckpoints(ctx, k+1, "pre-send", after)
	}
	return nil
}

// lowered returns the recorded usage lowered by what ctxd's own offloads and
// context-edit passes removed (the request ctxd would have sent), and that
// request's context size in tokens.
func (rp *run) lowered(ctx context.Context, u history.Usage) (history.Usage, uint64) {
	info, err := rp.e.Session(ctx, SessionID)
	if err != nil {
		return u, u.ContextTokens()
	}
	removed := uint64(math.Ceil(float64(rp.offloadSaved+info.EditedTokens) * info.Factor))
	for _, f := range []*uint64{&u.CacheReadInputTokens, &u.InputTokens, &u.CacheCreationInputTokens} {
		d := min(*f, removed)
		*f -= d
		removed -= d
	}
	return u, u.ContextTokens()
}

// appendBatch appends the messages between two responses, as an agent posts
// its tool results and the next prompt.
func (rp *run) appendBatch(ctx context.Context, k int, msgs []history.Message) error {
	rp.cost.add(msgs...)
	batch := make([]history.Message, len(msgs))
	for i, m := range msgs {
		m.Seq, m.Tokens = 0, 0
		batch[i] = m
	}
	res, err := rp.e.Append(ctx, SessionID, batch)
	if err != nil {
		return err
	}
	if res.Abandoned > 0 {
		rp.r.AbandonedRounds++
		rp.step(k, "abandoned_round", fmt.Sprintf("%d open tool calls closed before a new prompt", res.Abandoned))
	}
	// Offloads: what the stored stubs saved against the originals.
	var est history.Estimator
	j := 0
	for _, s := range res.Messages {
		for j < len(msgs) && msgs[j].ToolCallID != s.ToolCallID {
			j++
		}
		if j == len(msgs) || s.Role != history.RoleTool {
			j = 0
			continue
		}
		orig := est.Message(msgs[j])
		if orig > s.Tokens+16 && !bytes.Equal(textOf(msgs[j]), textOf(s)) {
			rp.offloadSaved += orig - s.Tokens
			rp.step(k, "offload", fmt.Sprintf("tool result %s (%s) offloaded: %d → %d tokens", s.ToolCallID, s.ToolName, orig, s.Tokens))
		}
	}
	return nil
}

func textOf(m history.Message) []byte {
	var b bytes.Buffer
	for _, bl := range m.Content {
		b.WriteString(bl.Text)
	}
	return b.Bytes()
}

// request records one assembled request: validity, and whether it extends
// the previous one byte for byte or follows a recorded rewrite.
func (rp *run) request(a *engine.Assembled, k int) {
	rp.check(a.Messages, a.Rules, fmt.Sprintf("request before response %d", k))
	enc := make([][]byte, len(a.Messages))
	for i, m := range a.Messages {
		enc[i], _ = history.Encode(m)
	}
	if rp.prev != nil {
		appendOnly := a.System == rp.prev.System && toolsEqual(a, rp.prev) && len(enc) >= len(rp.prevEnc)
		if appendOnly {
			for i := range rp.prevEnc {
				if !bytes.Equal(rp.prevEnc[i], enc[i]) {
					appendOnly = false
					break
				}
			}
		}
		if !appendOnly {
			rp.r.NonAppendRequests++
		}
		if n := rp.rewritesBetween(rp.prev.LastSeq, a.LastSeq, k); n > 0 {
			rp.r.RecordedRewrites++
		}
	}
	rp.prev, rp.prevEnc = a, enc
}

func toolsEqual(a, b *engine.Assembled) bool {
	if len(a.Tools) != len(b.Tools) {
		return false
	}
	for i := range a.Tools {
		if a.Tools[i].Name != b.Tools[i].Name || a.Tools[i].Description != b.Tools[i].Description || !bytes.Equal(a.Tools[i].InputSchema, b.Tools[i].InputSchema) {
			return false
		}
	}
	return true
}

// rewritesBetween counts recorded rewrites with from < seq ≤ to and shows the
// context-edit passes on the timeline.
func (rp *run) rewritesBetween(from, to uint64, k int) int {
	n := 0
	_ = rp.e.Events(context.Background(), SessionID, from+1, false, func(ev checkpoint.Event) error {
		if ev.Seq > to {
			return errStop
		}
		switch ev.Kind {
		case checkpoint.KindCheckpoint, checkpoint.KindPrefixReset:
			n++
		case checkpoint.KindContextEdit:
			n++
			var p struct {
				Count int    `json:"elided_count"`
				Saved uint64 `json:"chars_saved"`
			}
			_ = json.Unmarshal(ev.Data, &p)
			rp.r.ContextEditCharsSaved += p.Saved
			rp.step(k, "context_edit", fmt.Sprintf("context-edit pass: %d tool results elided, %d characters saved", p.Count, p.Saved))
		case checkpoint.KindSessionUpdated:
			if bytes.Contains(ev.Data, []byte(`"changed":["`)) {
				n++
			}
		}
		return nil
	})
	return n
}

type stopErr struct{}

func (stopErr) Error() string { return "stop" }

var errStop = stopErr{}

// newCheckpoints reports the checkpoints written since the last one seen.
func (rp *run) newCheckpoints(ctx context.Context, k int, signal string, after *engine.Assembled) error {
	cps, err := rp.e.Checkpoints(ctx, SessionID)
	if err != nil {
		return err
	}
	for _, cp := range cps {
		if cp.Seq <= rp.cpSeen {
			continue
		}
		rp.cpSeen = cp.Seq
		rp.compacted = true
		retained := 0
		if cp.FirstRetainedSeq > 0 {
			for _, m := range after.Messages {
				if m.Seq >= cp.FirstRetainedSeq && m.Seq <= cp.SnapshotSeq {
					retained++
				}
			}
		}
		c := Compaction{
			BeforeResponse: k, Signal: signal, TokensBefore: cp.TokensBefore, TokensAfter: cp.TokensAfter,
			RetainedMessages: retained, SummaryBytes: cp.SummaryBytes, Binding: cp.Binding,
			PrunedRetry: cp.PrunedRetry, Stalled: cp.Stalled,
		}
		rp.r.Compactions = append(rp.r.Compactions, c)
		rp.step(k, "compaction", fmt.Sprintf("%s compaction: %d → %d tokens, %d messages retained, %d-byte summary by %s%s",
			signal, c.TokensBefore, c.TokensAfter, c.RetainedMessages, c.SummaryBytes, c.Binding, map[bool]string{true: " (stalled)"}[c.Stalled]))
	}
	return nil
}

// modelFactor is the model catalog's token_factor for model, 1 when the
// catalog lacks it.
func modelFactor(cfg config.Config, model string) float64 {
	if m, ok := cfg.Model(model); ok && m.TokenFactor > 0 {
		return m.TokenFactor
	}
	return 1
}

func stats(errs []float64) ErrorStats {
	if len(errs) == 0 {
		return ErrorStats{}
	}
	abs := make([]float64, len(errs))
	signed := append([]float64(nil), errs...)
	for i, v := range errs {
		abs[i] = math.Abs(v)
	}
	p := accuracy.Percentiles(abs, 50, 90)
	sort.Float64s(signed)
	return ErrorStats{P50: round(p[0]), P90: round(p[1]), Samples: len(errs), Bias: round(signed[len(signed)/2])}
}

func round(v float64) float64 { return math.Round(v*10000) / 10000 }

// speculative reads the replay's speculative summaries from its ledger
// and log.
func speculative(ctx context.Context, e *engine.Engine) Speculative {
	var sp Speculative
	tokens := map[uint64]uint64{} // by prepared event seq
	_ = e.Events(ctx, SessionID, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindPrepared {
			var p struct {
				TokensBefore uint64 `json:"tokens_before"`
			}
			if json.Unmarshal(ev.Data, &p) == nil {
				tokens[ev.Seq] = p.TokensBefore
				sp.PreparedTokens += p.TokensBefore
			}
		}
		return nil
	})
	entries, _, err := e.Ledger(ctx, SessionID)
	if err != nil {
		return sp
	}
	ended := map[uint64]bool{}
	for _, en := range entries {
		if en.Kind != ledger.KindPrepared {
			continue
		}
		switch en.Outcome {
		case ledger.OutcomeReady:
			sp.Made++
		case ledger.OutcomeUsed:
			sp.Used++
			ended[en.PreparedSeq] = true
		case ledger.OutcomeExtended:
			sp.Extended++
			ended[en.PreparedSeq] = true
		case ledger.OutcomeUnused:
			sp.Unused++
			ended[en.PreparedSeq] = true
			sp.UnusedTokens += tokens[en.PreparedSeq]
		}
	}
	for seq, n := range tokens {
		if !ended[seq] {
			sp.Pending++
			sp.UnusedTokens += n
		}
	}
	return sp
}
