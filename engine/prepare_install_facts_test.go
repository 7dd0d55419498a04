package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/facttest"
)

// roundCut is the first index past half of msgs' estimate where no tool
// call waits on its result (not a tool result, not right after a call):
// a prepare job there finds the round closed.
func roundCut(msgs []history.Message) int {
	var est history.Estimator
	var total, n uint64
	for _, m := range msgs {
		total += est.Message(m)
	}
	for i, m := range msgs {
		if i > 0 && n*2 >= total && m.Role != history.RoleTool && !callsTools(msgs[i-1]) {
			return i
		}
		n += est.Message(m)
	}
	return 0
}

func callsTools(m history.Message) bool {
	for _, b := range m.Content {
		if b.Type == history.BlockToolCall {
			return true
		}
	}
	return false
}

// appendChunks appends msgs to session id a few at a time (one append is
// one store transaction) and returns the stored messages and the last
// append's result.
func (h *harness) appendChunks(id string, msgs []history.Message) ([]history.Message, AppendResult) {
	h.t.Helper()
	var stored []history.Message
	var res AppendResult
	for len(msgs) > 0 {
		n := min(len(msgs), 20)
		res = h.append(id, msgs[:n]...)
		stored = append(stored, res.Messages...)
		msgs = msgs[n:]
	}
	return stored, res
}

// TestInstalledFoldLosesNothing: nothing a prepared summary covers, nor
// anything after it, is lost when a compaction installs it and folds the
// rest. On every shared-corpus session with a fact list (its whole
// history), through the engine with the extractive summarizer: the first
// half (to a closed round) reaches the prepare mark and its summary is
// prepared; the rest comes in one step past the threshold, more than the
// retention budget, so the pre-send compaction installs the prepared
// summary and folds the new part (docs/design.md §5.1). Then the
// checkpoint's summary is the prepared one whole, then the fold; every
// listed fact the prepared summary states is in the context sent next;
// and every line of every message the checkpoint replaced — the covered
// range and the folded part — is in its recall file.
func TestInstalledFoldLosesNothing(t *testing.T) {
	for _, ff := range facttest.Load(t) {
		t.Run(ff.Session, func(t *testing.T) {
			if raceEnabled && ff.Large() {
				t.Skip("a large corpus session: minutes under the race detector")
			}
			pts := facttest.Points(t, ff.Session)
			msgs := make([]history.Message, len(pts[len(pts)-1].Msgs))
			for i, m := range pts[len(pts)-1].Msgs {
				m.Usage = nil // the recorded usage is the original agent's context
				msgs[i] = m
			}
			cut := roundCut(msgs)
			if cut == 0 {
				t.Skip("no closed round past the middle")
			}
			installFoldFacts(t, ff, msgs, cut)
		})
	}
}

func installFoldFacts(t *testing.T, ff *facttest.File, msgs []history.Message, cut int) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := recallConfig(dir)
	cfg.Offload.Enabled = false
	cfg.ContextCompaction.KeepRecentTokens = 2000
	cfg.ContextCompaction.PreparePercent = 30
	// The engine's own estimate of the first half and of the whole, in a
	// session too large to compact.
	h := newHarness(t, cfg, "")
	h.create("probe", 100000000)
	_, res := h.appendChunks("probe", msgs[:cut])
	half := res.Tokens
	_, res = h.appendChunks("probe", msgs[cut:])
	total := res.Tokens
	// A window whose threshold (70 %) lies halfway between the first half
	// and the whole, and whose prepare mark (30 %) the first half passes.
	limit := (half + total) / 2 * 10 / 7
	h.create("s", limit)
	stored, res := h.appendChunks("s", msgs[:cut])
	if res.Tokens >= res.Threshold || res.Tokens < limit*30/100 {
		t.Fatalf("first half: %d tokens, threshold %d, prepare mark %d", res.Tokens, res.Threshold, limit*30/100)
	}
	// The agent's next request: its pre-send check starts the summary.
	if _, err := h.e.Context(ctx, "s", ContextOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.e.WaitCompaction(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	ps := h.prepared("s")
	if len(ps) != 1 {
		t.Fatalf("%d prepared summaries after the first half; want 1", len(ps))
	}
	prep := ps[0]
	rest, res := h.appendChunks("s", msgs[cut:])
	stored = append(stored, rest...)
	if res.Tokens < res.Threshold {
		t.Fatalf("whole history: %d tokens, below the threshold %d", res.Tokens, res.Threshold)
	}
	a, err := h.e.Context(ctx, "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.e.WaitCompaction(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if !a.Compacted {
		t.Fatalf("the pre-send check did not compact: %s", a.Diagnostic)
	}
	cps := h.events("s", checkpoint.KindCheckpoint)
	if len(cps) != 1 {
		t.Fatalf("%d checkpoints; want 1", len(cps))
	}
	cp, err := h.log.GetCheckpoint(ctx, "s", cps[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cp.Summary, prep.Summary) {
		t.Fatalf("checkpoint summary %.200q…: want the prepared summary whole", cp.Summary)
	}
	sentText := contextText(h.context("s"))
	folded := cp.SnapshotSeq > prep.SnapshotSeq
	if folded != strings.Contains(cp.Summary, FoldHeading) {
		t.Fatalf("checkpoint covers to %d, the prepared summary to %d, fold heading %v", cp.SnapshotSeq, prep.SnapshotSeq, !folded)
	}
	if !folded {
		// The new part fit the retention budget: it follows verbatim.
		for _, m := range stored {
			if m.Seq <= prep.SnapshotSeq {
				continue
			}
			for _, b := range m.Content {
				if b.Type == history.BlockText && !strings.Contains(sentText, b.Text) {
					t.Fatalf("seq %d, after the prepared snapshot: its text is not in the context", m.Seq)
				}
			}
		}
	}

	// Every fact the prepared summary states is in what the agent sends.
	sent := strings.ToLower(sentText)
	stated, kept := 0, 0
	for _, f := range ff.Facts {
		if !f.Kept(strings.ToLower(prep.Summary)) {
			continue
		}
		stated++
		if !f.Kept(sent) {
			t.Errorf("fact %s (%v): stated by the prepared summary, missing after the install", f.ID, f.Any)
			continue
		}
		kept++
	}

	// Every line the checkpoint replaced is in its recall file.
	m := footerPathRe.FindStringSubmatch(cp.Summary)
	if m == nil {
		t.Fatalf("the summary names no recall file: %.300q", cp.Summary[max(0, len(cp.Summary)-300):])
	}
	data, err := os.ReadFile(filepath.Clean(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	recallText := string(data)
	lines := 0
	replaced := replacedTo(cp)
	for _, m := range stored {
		if m.Seq > replaced {
			break
		}
		for _, b := range m.Content {
			if b.Type != history.BlockText && b.Type != history.BlockThinking {
				continue
			}
			for _, l := range strings.Split(b.Text, "\n") {
				if l = strings.TrimSpace(l); l == "" {
					continue
				}
				lines++
				if !strings.Contains(recallText, l) {
					t.Fatalf("seq %d: line %q is in no recall file", m.Seq, l)
				}
			}
		}
	}
	atTrigger, _ := ff.Score("end", strings.ToLower(contextText(a)))
	t.Logf("cut at %d of %d messages (%d of %d tokens), new part folded %v: %d/%d facts the prepared summary states kept; %d replaced lines in the recall file; facts kept by the context sent %.1f %%", cut, len(msgs), half, total, folded, kept, stated, lines, atTrigger)
}
