package replay

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
)

// Summary output an LLM summarizer writes, and the price ratios of the
// idle-compaction model (docs/performance.md): a prepared summary's call
// reads the context from the cache (0.1× the input price) and writes the
// summary as output (5×).
const (
	modelSummaryTokens = 2560
	modelCacheRead     = 0.1
	modelOutput        = 5.0
)

// The speculative summaries of replays of the shared corpus, at the
// model's window and at a 60,000-token one: each prepared summary ends
// exactly one way (used, extended, unused, or pending at the end), and
// the ones never used are counted with the context they read. With
// CTXD_REPLAY_SPECULATIVE_TABLE=FILE the rows are written there as the
// table of docs/performance.md, with what the unused ones, and all of
// them, would have cost with an LLM summarizer (each modelled as reading
// its context from the cache; an extension reads the previous summary
// and the new part instead, about as much) against what ctxd saved.
func TestSpeculativeOnTheCorpus(t *testing.T) {
	files := []string{
		"claude-code/autocompact-150tools.jsonl",
		"claude-code/v1-167tools-sidechains.jsonl",
		"pi/454tools-2compactions.jsonl",
		"swe-agent/marshmallow-1867.traj.json",
		"recorded/pi/pi0.73.1-anthropic-1compaction.jsonl",
		"recorded/claude-code/cc2.1.197-two-turns.jsonl",
	}
	var rows []string
	var sum Speculative
	var unusedCost, allCost, saved float64
	for _, window := range []uint64{200000, 60000} {
		for _, f := range files {
			t.Run(fmt.Sprintf("%s/%d", f, window), func(t *testing.T) {
				if raceEnabled && !strings.HasPrefix(f, "recorded/") && f != "swe-agent/marshmallow-1867.traj.json" {
					t.Skip("a large corpus session: minutes under the race detector")
				}
				r, err := Run(context.Background(), importCorpus(t, f), Options{Config: config.Defaults(), ContextLimit: window})
				if err != nil {
					t.Fatal(err)
				}
				sp := r.Speculative
				if sp.Used+sp.Extended+sp.Unused+sp.Pending != sp.Made {
					t.Fatalf("made %d ≠ used %d + extended %d + unused %d + pending %d", sp.Made, sp.Used, sp.Extended, sp.Unused, sp.Pending)
				}
				if sp.UnusedTokens > sp.PreparedTokens || (sp.Unused+sp.Pending == 0) != (sp.UnusedTokens == 0) {
					t.Fatalf("unused tokens %d of %d prepared, %d unused or pending", sp.UnusedTokens, sp.PreparedTokens, sp.Unused+sp.Pending)
				}
				price := r.Cost.Price.Input / 1e6
				cost := (float64(sp.UnusedTokens)*modelCacheRead + float64((sp.Unused+sp.Pending)*modelSummaryTokens)*modelOutput) * price
				all := (float64(sp.PreparedTokens)*modelCacheRead + float64(sp.Made*modelSummaryTokens)*modelOutput) * price
				row := fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %d | %d | $%.4f | $%.4f | $%.4f |", f, window, len(r.Compactions), sp.Made, sp.Used, sp.Extended, sp.Unused, sp.Pending, cost, all, r.Cost.Totals.Saved)
				t.Log(row)
				rows = append(rows, row)
				sum.Made += sp.Made
				sum.Used += sp.Used
				sum.Extended += sp.Extended
				sum.Unused += sp.Unused
				sum.Pending += sp.Pending
				unusedCost += cost
				allCost += all
				saved += r.Cost.Totals.Saved
			})
		}
	}
	total := fmt.Sprintf("| all | | | %d | %d | %d | %d | %d | $%.4f | $%.4f | $%.4f |", sum.Made, sum.Used, sum.Extended, sum.Unused, sum.Pending, unusedCost, allCost, saved)
	t.Log(total)
	if path := os.Getenv("CTXD_REPLAY_SPECULATIVE_TABLE"); path != "" {
		head := "| session | window | compactions | prepared | used | extended | unused | pending at the end | unused, as LLM calls | all, as LLM calls | ctxd saved |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
		if err := os.WriteFile(path, []byte(head+strings.Join(append(rows, total), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
