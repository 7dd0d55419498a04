package engine

import (
	"fmt"

	"github.com/ctxd/ctxd/history"
)

// compactionWeighing is what an automatic compaction would cost and save
// (docs/design.md §4), in input-token units at the provider's cache
// prices: it rewrites what it leaves (After) at the cache-write price and
// calls the summarizer, and it saves every later request reading the
// Tokens − After it removes from the cache. It is weighed only below the
// hard mark (Hard, halfway from the threshold to the window): there the
// request still fits and the compaction can wait; at or above it, or when
// the window is unknown, it fires as the threshold says.
type compactionWeighing struct {
	Tokens, After, Hard uint64
	// Requests is the requests the compaction is expected to save on:
	// the session's answers so far (a session that has run n requests is
	// expected to run about as many more) plus those that fit before the
	// hard mark at the session's growth per answer since its checkpoint
	// (the compaction would run there anyway).
	Requests uint64
	// Cost is After × (1.25 − 0.1) plus the summarizer's call; Savings is
	// (Tokens − After) × 0.1 × Requests.
	Cost, Savings float64
}

// PaysBack reports whether the compaction's savings reach its cost.
func (w compactionWeighing) PaysBack() bool { return w.Savings >= w.Cost }

// weighCompaction weighs an automatic compaction of the session at tokens
// (estimate); ok is false when it is not weighed (weigh_compactions off,
// no window, or at or over the hard mark). A compaction expected to leave as much as it
// found saves nothing. Called with s.mu held.
func (e *Engine) weighCompaction(s *session, tokens uint64) (w compactionWeighing, ok bool) {
	if !s.cfg.ContextCompaction.WeighCompactions || s.win.source == WindowUnknown || s.limit <= s.threshold || s.threshold == 0 {
		return w, false
	}
	w.Tokens, w.Hard = tokens, s.threshold+(s.limit-s.threshold)/2
	if tokens >= w.Hard {
		return w, false
	}
	summary := uint64(s.cfg.Compaction.ExtractiveSummaryBytes / 4)
	if p := e.usablePrepared(s); p != nil {
		summary = e.est.Message(preparedMessage(p))
	}
	fixed := e.fixedPrefix(s)
	w.After = fixed + s.calibrate(summary) + min(e.retentionTarget(s, s.shape, summary), tokens)
	var answers uint64
	for i := range s.active {
		if s.active[i].msg.Role == history.RoleAssistant {
			answers++
		}
	}
	growth := uint64(1)
	if tokens > fixed {
		growth = max((tokens-fixed)/max(answers, 1), 1)
	}
	w.Requests = s.assistants + (w.Hard-tokens)/growth
	w.Cost = float64(w.After)*(cacheWriteFactor-cacheReadFactor) + e.idleSummarizerCost(s, tokens, summary)
	if tokens > w.After {
		w.Savings = float64(tokens-w.After) * cacheReadFactor * float64(w.Requests)
	}
	return w, true
}

// String says the weighing in an operator's words.
func (w compactionWeighing) String() string {
	return fmt.Sprintf("a compaction to about %d tokens would save %.0f over the %d requests expected, less than it costs (%.0f: the rewrite at the cache-write price and the summary); deferred until it pays or the context reaches %d tokens",
		w.After, w.Savings, w.Requests, w.Cost, w.Hard)
}
