package summarizer

import (
	"fmt"
	"testing"
)

// llmSizeFactor is the byte budget of the extractive summary against the
// original agent's own LLM summary at the same point.
const llmSizeFactor = 1.2

// TestExtractiveAtTheLLMSummarySize: at every corpus point where the
// original agent wrote its own LLM summary, the extractive summary given
// 1.2× that summary's bytes keeps at least 92 % of the fact weight over all
// such points, and the LLM summaries are scored on the same facts (the
// figures of docs/performance.md "Extractive summaries against the agents'
// own").
func TestExtractiveAtTheLLMSummarySize(t *testing.T) {
	var exKept, exTotal, llmKept, exBytes, llmBytes float64
	kindW, kindK := map[string]float64{}, map[string]float64{}
	if raceEnabled {
		t.Skip("the corpus's large sessions: minutes under the race detector")
	}
	for _, ff := range loadFacts(t) {
		for _, pt := range factPoints(t, ff.Session) {
			if pt.LLM == "" {
				continue
			}
			budget := uint64(llmSizeFactor * float64(len(pt.LLM)))
			s := ExtractiveSummary(pt.Msgs, budget)
			if uint64(len(s)) > budget {
				t.Errorf("%s %s: %d bytes > budget %d", ff.Session, pt.Name, len(s), budget)
			}
			var w, k, lk float64
			var lost []string
			for _, f := range ff.Facts {
				if !f.Applies(pt.Name) {
					continue
				}
				w += f.Weight
				kindW[f.Kind] += f.Weight
				if f.Kept(s) {
					k += f.Weight
					kindK[f.Kind] += f.Weight
				} else {
					lost = append(lost, f.ID)
				}
				if f.Kept(pt.LLM) {
					lk += f.Weight
				}
			}
			t.Logf("%s %s: LLM %d bytes %.0f %%; extractive %d bytes (%.2f×) %.0f %%; lost %v", ff.Session, pt.Name,
				len(pt.LLM), 100*lk/w, len(s), float64(len(s))/float64(len(pt.LLM)), 100*k/w, lost)
			exKept, exTotal, llmKept = exKept+k, exTotal+w, llmKept+lk
			exBytes, llmBytes = exBytes+float64(len(s)), llmBytes+float64(len(pt.LLM))
		}
	}
	line := fmt.Sprintf("all points: extractive %.1f %% of the fact weight in %.0f bytes (%.2f× the LLM summaries' %.0f), LLM summaries %.1f %%",
		100*exKept/exTotal, exBytes, exBytes/llmBytes, llmBytes, 100*llmKept/exTotal)
	t.Log(line)
	for _, kind := range []string{"task", "identifier", "file", "command", "error", "fix", "decision", "next"} {
		if kindW[kind] > 0 {
			t.Logf("  %s: %.0f %% of %.0f", kind, 100*kindK[kind]/kindW[kind], kindW[kind])
		}
	}
	if 100*exKept/exTotal < 92 {
		t.Errorf("%s: < 92 %%", line)
	}
	if exBytes > llmSizeFactor*llmBytes {
		t.Errorf("%s: more than %.1f× the bytes", line, llmSizeFactor)
	}
}
