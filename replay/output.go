package replay

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ctxd/ctxd/ledger"
)

// count is "1 offload", "2 offloads": n with the noun of its number.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// WriteText writes the human reading of a report: the figures, ctxd's
// compactions beside the original agent's, and the checks.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "\n%s session: %d responses, %d messages, %d tool calls", r.Format, r.Responses, r.Messages, r.ToolCalls)
	if r.TrailingCalls > 0 {
		fmt.Fprintf(w, " (and %d at the end of the file that got no result, left out)", r.TrailingCalls)
	}
	if r.CutLine > 0 {
		fmt.Fprintf(w, "; line %d was cut short and skipped", r.CutLine)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "context limit %d tokens, threshold %d\n", r.ContextLimit, r.Threshold)
	fmt.Fprintf(w, "layers: %s (%d tokens saved), %s (%d characters saved), %s",
		count(r.Offloads, "offload", "offloads"), r.OffloadTokensSaved, count(r.ContextEditPasses, "context-edit pass", "context-edit passes"),
		r.ContextEditCharsSaved, count(len(r.Compactions), "compaction", "compactions"))
	if r.ContextEditDeferred > 0 {
		fmt.Fprintf(w, ", a context-edit pass deferred at %d appends (it would not pay for its cache rewrite before the next compaction)", r.ContextEditDeferred)
	}
	if r.AbandonedRounds > 0 {
		fmt.Fprintf(w, ", %d abandoned rounds closed", r.AbandonedRounds)
	}
	fmt.Fprintln(w)
	for _, c := range r.Compactions {
		stalled := ""
		if c.Stalled {
			stalled = " STALLED"
		}
		fmt.Fprintf(w, "  ctxd compacted before response %d (%s): %d → %d tokens, %d retained messages, %d-byte summary (%s)%s\n",
			c.BeforeResponse, c.Signal, c.TokensBefore, c.TokensAfter, c.RetainedMessages, c.SummaryBytes, c.Binding, stalled)
	}
	for _, c := range r.OriginalCompactions {
		fmt.Fprintf(w, "  the original agent compacted before response %d at %d tokens\n", c.BeforeResponse, c.PreTokens)
	}
	fmt.Fprintf(w, "final context: %d tokens\n", r.FinalTokens)
	if r.EstimateError.Samples > 0 {
		fmt.Fprintf(w, "estimate vs recorded usage: p50 %.1f %%, p90 %.1f %% (%d requests)\n", 100*r.EstimateError.P50, 100*r.EstimateError.P90, r.EstimateError.Samples)
	}
	if r.GrowthError.Samples > 0 {
		fmt.Fprintf(w, "estimated growth vs recorded: p50 %.1f %%, p90 %.1f %% (%d pairs)\n", 100*r.GrowthError.P50, 100*r.GrowthError.P90, r.GrowthError.Samples)
	}
	r.Cost.writeText(w)
	ok := r.OrphanToolResults == 0 && r.UnansweredToolCalls == 0 && r.ProviderRuleViolations == 0 && r.NonAppendRequests == r.RecordedRewrites
	verdict := "ok"
	if !ok {
		verdict = "PROBLEM"
	}
	fmt.Fprintf(w, "checks: %d orphan tool results, %d unanswered tool calls, %d provider-rule violations, %d non-append requests for %d recorded rewrites: %s\n",
		r.OrphanToolResults, r.UnansweredToolCalls, r.ProviderRuleViolations, r.NonAppendRequests, r.RecordedRewrites, verdict)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  violation: %s\n", v)
	}
}

// WriteStep writes one timeline line.
func WriteStep(w io.Writer, s Step) {
	fmt.Fprintf(w, "[response %4d] %-19s %s\n", s.Response, s.Kind, s.Text)
}

// IsTerminal reports whether f is a terminal (a character device), for
// showing a progress bar.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// ProgressBar returns a Progress function drawing a bar on w, redrawn in
// place, and a function that clears it.
func ProgressBar(w io.Writer, label string) (progress func(done, total int), clear func()) {
	last := -1
	progress = func(done, total int) {
		if total == 0 {
			return
		}
		pct := done * 100 / total
		if pct == last {
			return
		}
		last = pct
		n := pct * 30 / 100
		fmt.Fprintf(w, "\r%s [%s%s] %3d%% (%d/%d)", label, strings.Repeat("=", n), strings.Repeat(" ", 30-n), pct, done, total)
	}
	clear = func() {
		if last >= 0 {
			fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", len(label)+50))
		}
	}
	return progress, clear
}

// writeText writes the cost section: without ctxd, with ctxd, the
// summarizer, the net saving with its denominator, cache writes by cause.
func (c Cost) writeText(w io.Writer) {
	t := c.Totals
	unit := "US dollars at " + c.Model + "'s price"
	if !c.Priced {
		fmt.Fprintf(w, "cost: %s has no price ([models.%q.price]); tokens only\n", c.Model, c.Model)
	}
	fmt.Fprintf(w, "cost (%s, cache-aware): %s; without ctxd %s (%d tokens sent: %d read from the cache, %d written, %d uncached); with ctxd %s (%d tokens: %d read, %d written, %d uncached); summarizer %s\n",
		unit, count(int(t.Requests), "request", "requests"), ledger.USD(t.WithoutCtxd), t.ClientTokens, t.Counterfactual.CacheRead, t.Counterfactual.CacheWrite(), t.Counterfactual.Input,
		ledger.USD(t.Paid), t.SentTokens, t.Reported.CacheRead, t.Reported.CacheWrite(), t.Reported.Input, ledger.USD(t.Summarizer))
	fmt.Fprintf(w, "saved: %s = without ctxd − with ctxd − summarizer, %.1f %% of the %s without ctxd\n", ledger.USD(t.Saved), 100*t.SavedShare, ledger.USD(t.WithoutCtxd))
	if len(t.CacheWrites) > 0 {
		fmt.Fprintf(w, "ctxd's cache writes by cause (tokens):")
		for _, k := range ledger.Causes() {
			if n, ok := t.CacheWrites[k]; ok {
				fmt.Fprintf(w, " %s %d", k, n)
			}
		}
		fmt.Fprintln(w)
	}
}
