// Package trigger owns ctxd's compaction trigger (docs/design.md §5.1, §5.2):
// threshold arithmetic, post-check and pre-send decisions, and
// keep_recent_tokens retention. It never calls a summarizer.
package trigger

import (
	"math/bits"

	"github.com/ctxd/ctxd/config"
)

// Threshold returns the token count at or above which a session of
// contextLimit tokens compacts (docs/design.md §3, §5.1):
//
//   - t.Percent = N: floor(contextLimit × N / 100), exact for every uint64
//     limit (the product is taken in 128 bits, so nothing overflows);
//   - t.BufferTokens = N: contextLimit − N, saturating at 0.
//
// t is expected to be valid (config.Load checks that exactly one field is
// set, Percent in 1..=99). If both are set Percent wins; if neither is set
// the threshold is contextLimit, i.e. compaction only when the window is full;
// an invalid Percent above 100 is clamped to contextLimit too.
func Threshold(contextLimit uint64, t config.Trigger) uint64 {
	switch {
	case t.Percent > 0:
		hi, lo := bits.Mul64(contextLimit, t.Percent)
		if hi >= 100 {
			// Only possible when Percent > 100 (an invalid trigger): the
			// quotient would not fit, so clamp rather than panic.
			return contextLimit
		}
		q, _ := bits.Div64(hi, lo, 100)
		return min(q, contextLimit)
	case t.BufferTokens > 0:
		if t.BufferTokens >= contextLimit {
			return 0
		}
		return contextLimit - t.BufferTokens
	default:
		return contextLimit
	}
}
