package history_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/accuracy"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
)

// claudeFactor is the model catalog's default token factor for Claude models
// (docs/design.md §2): where every method starts, nothing fitted on the corpus.
const claudeFactor = 1.35

// chosen is the growth estimate ctxd uses (docs/decisions.md "Estimator
// accuracy"): the previous response at its reported output where plausible,
// the appended messages at the o200k estimate times a factor calibrated
// online from earlier growths.
var chosen = accuracy.Method{Factor: claudeFactor, Online: true, ReportedOutput: true}

// TestEstimatorAccuracy computes the estimator table on the corpus
// (docs/decisions.md "Estimator accuracy"):
// |relative error| of the estimated growth between consecutive responses
// (recorded growth > 500 tokens, before the first original compaction),
// beside chars/4's on the same pairs. It asserts the goal (p50 ≤ 10 %, p90 ≤
// half of chars/4's) where it is met, and a regression bound where not.
func TestEstimatorAccuracy(t *testing.T) {
	type goal int
	const (
		full      goal = iota // p50 ≤ 10 %, p90 ≤ chars/4 p90 / 2
		p50Only               // p50 ≤ 10 %, p90 < chars/4 p90
		beatChars             // p90 < chars/4 p90 (too few pairs to judge)
	)
	cases := []struct {
		name, file string
		agents     bool // each sub-agent of the file, as its own conversation
		goal       goal
	}{
		// Claude Code 2.1.39 injects text it does not log after some Edit and
		// Write results (PostToolUse hooks; 9 of 34 pairs grow 1.4–2.9×
		// their logged content): no estimate of the log can see it.
		{"claude-code autocompact", "claude-code/autocompact-150tools.jsonl", false, p50Only},
		{"claude-code v1 main", "claude-code/v1-167tools-sidechains.jsonl", false, beatChars},
		{"claude-code v1 sub-agents", "claude-code/v1-167tools-sidechains.jsonl", true, full},
		{"pi", "pi/454tools-2compactions.jsonl", false, full},
	}
	var est history.Estimator
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := corpustest.Read(t, tc.file)
			convs := [][]byte{data}
			if tc.agents {
				convs = accuracy.ClaudeCodeAgents(data)
			}
			var trs []*transcript.Transcript
			for _, c := range convs {
				tr, err := transcript.Import(bytes.NewReader(c), transcript.Options{})
				if err != nil {
					t.Fatal(err)
				}
				trs = append(trs, tr)
			}
			row := func(m accuracy.Method) accuracy.Summary {
				var pairs []accuracy.Pair
				for _, tr := range trs {
					pairs = append(pairs, accuracy.GrowthPairs(tr, est, m)...)
				}
				return accuracy.Summarize(pairs)
			}
			t.Logf("%d conversation(s)", len(trs))
			var got accuracy.Summary
			for _, r := range []struct {
				label string
				m     accuracy.Method
			}{
				{"before: fixed 1.35", accuracy.Method{Factor: claudeFactor}},
				{"before: fixed 1.2 (fitted)", accuracy.Method{Factor: 1.2}},
				{"online only", accuracy.Method{Factor: claudeFactor, Online: true}},
				{"reported output only", accuracy.Method{Factor: claudeFactor, ReportedOutput: true}},
				{"chosen", chosen},
			} {
				s := row(r.m)
				t.Logf("%-27s pairs %3d  estimator p50 %5s p90 %5s (bias %5s)  chars/4 p50 %5s p90 %5s",
					r.label, s.Pairs, pct(s.P50), pct(s.P90), pct(s.Bias), pct(s.Chars4P50), pct(s.Chars4P90))
				if r.m == chosen {
					got = s
				}
			}
			if got.Pairs == 0 {
				t.Fatal("no pairs with recorded growth > 500 tokens")
			}
			if got.P90 >= got.Chars4P90 {
				t.Errorf("estimator p90 %s not below chars/4's %s", pct(got.P90), pct(got.Chars4P90))
			}
			if tc.goal <= p50Only && got.P50 > 0.10 {
				t.Errorf("estimator p50 %s > 10 %%", pct(got.P50))
			}
			if tc.goal == full && got.P90 > got.Chars4P90/2 {
				t.Errorf("estimator p90 %s > half of chars/4's %s", pct(got.P90), pct(got.Chars4P90))
			}
		})
	}
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }
