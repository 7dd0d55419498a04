package engine

import (
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/facttest"
	"github.com/ctxd/ctxd/summarizer"
)

// prepareCut is where a summary prepared at the default prepare mark
// (60 % of the window) would have stopped in msgs summarized at the
// trigger (70 %): the first user prompt or assistant message after 6/7 of
// the history's estimate, so that no tool result is cut from its call.
func prepareCut(msgs []history.Message) int {
	var est history.Estimator
	var total uint64
	for _, m := range msgs {
		total += est.Message(m)
	}
	var n uint64
	for i, m := range msgs {
		if n*7 >= total*6 && m.Role != history.RoleTool {
			return i
		}
		n += est.Message(m)
	}
	return len(msgs)
}

// TestSpeculativeFidelityNotLower: on every shared-corpus session with a
// fact file, at every point, the summary a speculative install gives when
// the new part does not fit (the summary prepared at the prepare mark, then
// the fold of what came after: foldSummary) keeps no smaller a share of the
// facts than the summary made at the trigger, both extractive at the
// default budget (internal/facttest).
func TestSpeculativeFidelityNotLower(t *testing.T) {
	for _, ff := range facttest.Load(t) {
		t.Run(ff.Session, func(t *testing.T) {
			for _, pt := range facttest.Points(t, ff.Session) {
				cut := prepareCut(pt.Msgs)
				if cut == 0 || cut == len(pt.Msgs) {
					continue
				}
				atTrigger := summarizer.ExtractiveSummary(pt.Msgs, config.DefaultExtractiveSummaryBytes)
				prepared := summarizer.ExtractiveSummary(pt.Msgs[:cut], config.DefaultExtractiveSummaryBytes)
				spec, ok := foldSummary(prepared, pt.Msgs[cut:], config.DefaultExtractiveSummaryBytes, config.DefaultMaxSummaryBytes)
				if !ok {
					t.Fatalf("%s: no room for the fold", pt.Name)
				}
				want, _ := ff.Score(pt.Name, atTrigger)
				got, lost := ff.Score(pt.Name, spec)
				t.Logf("%s: cut at %d of %d messages: at the trigger %.1f %%, speculative %.1f %%", pt.Name, cut, len(pt.Msgs), want, got)
				if got < want {
					t.Errorf("%s: speculative keeps %.1f %% < %.1f %% at the trigger; lost %v", pt.Name, got, want, lost)
				}
			}
		})
	}
}
