package trigger

import "fmt"

// OverflowMargin is the share of the context window an overflow retry
// keeps free by the provider's count: the estimate of what changed since
// the provider counted errs, and a retry refused again costs the agent
// its answer.
const OverflowMargin = 0.05

// OverflowTarget is the most tokens the retry of a request the provider
// refused as too long may carry, and what it is, in words: the window less
// OverflowMargin; with no window known (0), a tenth under the provider's
// count of the refused request, or under before, ctxd's estimate of it,
// when the provider gave no count (docs/design.md §10).
func OverflowTarget(window, count, before uint64) (uint64, string) {
	if window > 0 {
		t := uint64(float64(window) * (1 - OverflowMargin))
		return t, fmt.Sprintf("the window of %d tokens less a %.0f %% margin (%d)", window, OverflowMargin*100, t)
	}
	ref, what := count, "the provider's count of the refused request"
	if ref == 0 {
		ref, what = before, "ctxd's estimate of the refused request"
	}
	t := ref * 9 / 10
	return t, fmt.Sprintf("a tenth under %s, %d tokens (%d)", what, ref, t)
}
