package trigger

import "github.com/ctxd/ctxd/history"

// Shapes of a compaction (docs/design.md §3 [compaction].shape), resolved: "auto"
// is never passed here, the engine resolves it first with ResolveShape.
const (
	ShapeKeepTail = "keep-tail"
	ShapeSimple   = "simple"
	ShapeServer   = "server"
	ShapeAuto     = "auto"
)

// ResolveShape turns the configured shape into the one used (docs/design.md §3):
// "auto" is "simple" where the model binds thinking to the prefix (a retained
// tail would carry thinking whose signature no longer matches), else
// "keep-tail". Any other value is returned as is.
func ResolveShape(configured string, thinkingBinding bool) string {
	if configured != ShapeAuto && configured != "" {
		return configured
	}
	if thinkingBinding {
		return ShapeSimple
	}
	return ShapeKeepTail
}

// Retention is what the retention target is computed from (docs/design.md §5.2).
// All figures are tokens.
type Retention struct {
	// KeepRecentTokens is [context_compaction].keep_recent_tokens; 0 retains
	// nothing.
	KeepRecentTokens uint64
	// ContextLimit is the session's context window.
	ContextLimit uint64
	// FixedTokens is system prompt + tool definitions + pinned context +
	// the new summary: what the window holds besides retained messages.
	FixedTokens uint64
	// Shape is the resolved shape; simple and server retain nothing.
	Shape string
}

// Target is min(keep_recent_tokens, context_limit / 4, available), where
// available = context_limit − FixedTokens saturating at 0; 0 for the shapes
// simple and server (docs/design.md §5.2).
func (r Retention) Target() uint64 {
	if r.Shape == ShapeSimple || r.Shape == ShapeServer {
		return 0
	}
	var available uint64
	if r.ContextLimit > r.FixedTokens {
		available = r.ContextLimit - r.FixedTokens
	}
	return min(r.KeepRecentTokens, r.ContextLimit/4, available)
}

// RetainGroups walks groupTokens (one entry per group, oldest first, in
// tokens) from the newest back, keeping whole groups while their sum stays
// ≤ target, and stops at the first group that does not fit (docs/design.md §5.2).
// It returns how many trailing groups are kept: 0 when the newest group alone
// exceeds target or target is 0. It runs in O(kept groups).
func RetainGroups(groupTokens []uint64, target uint64) int {
	var sum uint64
	kept := 0
	for i := len(groupTokens) - 1; i >= 0; i-- {
		t := groupTokens[i]
		if t > target-sum { // sum ≤ target always holds, so no underflow
			break
		}
		sum += t
		kept++
	}
	return kept
}

// RetainedStart returns the index of the first retained message of msgs, whose
// per-message estimates (tokens, already calibrated) are tokens: len(msgs)
// when nothing is retained. groups must partition msgs (history.Groups). The
// retained suffix is msgs[start:], byte-identical to what was stored: whole
// groups only, so a tool result never loses its call. Like RetainGroups it
// looks only at the groups it keeps and the first that does not fit.
func RetainedStart(groups []history.Group, tokens []uint64, target uint64) int {
	start := len(tokens)
	var sum uint64
	for i := len(groups) - 1; i >= 0; i-- {
		g := groups[i]
		var t uint64
		for j := g.Start; j < g.End; j++ {
			t += tokens[j]
		}
		if t > target-sum {
			break
		}
		sum += t
		start = g.Start
	}
	return start
}
