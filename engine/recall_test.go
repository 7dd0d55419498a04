package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/facttest"
	"github.com/ctxd/ctxd/recall"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
)

// recallConfig is testConfig with offloading on into dir.
func recallConfig(dir string) config.Config {
	cfg := testConfig()
	cfg.Offload.Enabled = true
	cfg.Offload.Dir = dir
	cfg.Offload.MaxChars = 2000
	cfg.Offload.Exclude = nil
	return cfg
}

// fullCheckpoint is the stored checkpoint cp with its summary.
func (h *harness) fullCheckpoint(id string, cp *checkpoint.Checkpoint) checkpoint.Checkpoint {
	h.t.Helper()
	if cp == nil {
		h.t.Fatal("no checkpoint")
	}
	full, err := h.e.opts.Log.GetCheckpoint(context.Background(), id, cp.Seq)
	if err != nil {
		h.t.Fatal(err)
	}
	return full
}

// footerPathRe finds the recall file a summary names.
var footerPathRe = regexp.MustCompile(`are in (\S+recall-\d+-\d+\.txt) word for word`)

// A compaction writes the full text of what it replaced — every message
// with its seq and role, tool calls with their inputs verbatim, an
// offloaded result whole rather than its stub — to a recall file beside the
// session's offloaded results, before the checkpoint is stored, and the
// summary ends with its path and how to search it (docs/design.md §5.6).
func TestRecallFileHoldsWhatTheCheckpointReplaced(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, recallConfig(dir), "")
	h.create("s", 20000)
	big := words(3000) + "\nneedle: the flaky test is TestWidgetRace in widget_test.go\n" + words(3000)
	call := history.Message{Role: history.RoleAssistant, Content: []history.Block{
		{Type: history.BlockText, Text: "Running the suite."},
		{Type: history.BlockToolCall, ID: "c1", Name: "Bash", Input: []byte(`{"command":"go test -run 'Widget' ./...\ngo vet ./..."}`)}}}
	h.append("s", user("find the flaky test"), call,
		history.Message{Role: history.RoleTool, ToolCallID: "c1", ToolName: "Bash", Content: []history.Block{{Type: history.BlockText, Text: big}}},
		assistant("Found it: "+words(7000)), user("now fix it"), assistant("Fixing."))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	cp := h.fullCheckpoint("s", res.Checkpoint)
	m := footerPathRe.FindStringSubmatch(cp.Summary)
	if m == nil {
		t.Fatalf("the summary names no recall file; it ends %q", tail(cp.Summary, 400))
	}
	path := m[1]
	if !strings.HasSuffix(strings.TrimSpace(cp.Summary), "rather than guess or re-run a tool.") {
		t.Errorf("the summary does not end with how to search: %q", tail(cp.Summary, 200))
	}
	if filepath.Dir(path) != filepath.Join(dir, "s") {
		t.Errorf("recall file %s is not beside the offloaded results in %s", path, filepath.Join(dir, "s"))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the recall file the summary names: %v", err)
	}
	text := string(b)
	for _, want := range []string{
		"=== seq 1 · user", "find the flaky test",
		"=== seq 2 · assistant", "[tool call Bash id=c1]", "command: go test -run 'Widget' ./...\ngo vet ./...",
		"· tool result · Bash · call c1",
		"needle: the flaky test is TestWidgetRace in widget_test.go", // only in the offloaded whole, not the stub
		"Found it:",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("recall file lacks %q", want)
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != 0o600 {
		t.Errorf("recall file mode %v, want 0600", fi.Mode().Perm())
	}
	// The retained messages are not in it: they are still in the context.
	if res.Checkpoint.FirstRetainedSeq > 0 && strings.Contains(text, "Fixing.") {
		t.Errorf("recall file holds a retained message")
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// A recall file that cannot be written (the offload directory is a file)
// leaves the checkpoint as it would be, its summary saying the history is
// not available as a file.
func TestRecallWriteFailureSaysSo(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, recallConfig(notDir), "")
	h.create("s", 20000)
	h.append("s", user("go"), assistant(words(5000)), user("again"), assistant(words(5000)), user("last"), assistant("ok"))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	cp := h.fullCheckpoint("s", res.Checkpoint)
	if !strings.HasSuffix(cp.Summary, recall.Unavailable) {
		t.Fatalf("summary ends %q, want the unavailable note", tail(cp.Summary, 200))
	}
	if strings.Contains(cp.Summary, "grep") {
		t.Errorf("a summary without a recall file tells the agent to grep one")
	}
	if cp.Stalled || cp.TokensAfter >= cp.TokensBefore {
		t.Errorf("checkpoint changed by the failed write: %+v", cp)
	}
}

// corpusRun appends a corpus session to the engine in n segments and
// compacts (manually, with the extractive summarizer) at the end of each,
// returning the summaries in order, the session's offload directory, the
// messages as stored and the checkpoints.
type corpusRun struct {
	summaries []string
	dir       string
	stored    []history.Message
	last      checkpoint.Checkpoint
	cps       []checkpoint.Checkpoint
	h         *harness
}

// replacedTo is the last seq the summary of cp replaced.
func replacedTo(cp checkpoint.Checkpoint) uint64 {
	if cp.FirstRetainedSeq > 0 {
		return cp.FirstRetainedSeq - 1
	}
	return cp.SnapshotSeq
}

func runCorpusCompactions(t *testing.T, msgs []history.Message, n int) corpusRun {
	t.Helper()
	dir := t.TempDir()
	cfg := recallConfig(dir)
	cfg.Offload.MaxChars = 16000
	cfg.ContextCompaction.Auto = false
	cfg.ContextCompaction.KeepRecentTokens = corpusKeepRecent(msgs)
	h := newHarness(t, cfg, "")
	h.create("s", 1000000)
	run := corpusRun{dir: filepath.Join(dir, "s"), h: h}
	cuts := facttest.Cuts(msgs, n)
	for i, m := range msgs {
		ar := h.append("s", m)
		run.stored = append(run.stored, ar.Messages...)
		if len(cuts) == 0 || i+1 != cuts[0] {
			continue
		}
		cuts = cuts[1:]
		res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
		if err != nil {
			t.Logf("compaction after message %d: %v", i, err)
			continue
		}
		run.last = h.fullCheckpoint("s", res.Checkpoint)
		run.cps = append(run.cps, run.last)
		run.summaries = append(run.summaries, run.last.Summary)
	}
	return run
}

// corpusKeepRecent is the retention budget of a corpus run: 2000 tokens,
// and none for a session of a few dozen messages, whose every segment
// since a compaction would otherwise fit in 2000 tokens and leave nothing
// to compact.
func corpusKeepRecent(msgs []history.Message) uint64 {
	if len(msgs) < 100 {
		return 0
	}
	return 2000
}

// recallText is every recall file of the run, concatenated.
func (r corpusRun) recallText(t *testing.T) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(r.dir, recall.FileGlob))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no recall files in %s: %v", r.dir, err)
	}
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// After compactions of every corpus session with a fact list, a plain text
// search of the recall files finds every line of every message a summary
// replaced, and every fact of the list that the history up to the last
// compaction holds (docs/design.md §5.6).
func TestRecallFilesHoldEveryFact(t *testing.T) {
	for _, ff := range facttest.Load(t) {
		t.Run(ff.Session, func(t *testing.T) {
			if raceEnabled && ff.Large() {
				t.Skip("a large corpus session: minutes under the race detector")
			}
			pts := facttest.Points(t, ff.Session)
			msgs := pts[len(pts)-1].Msgs
			run := runCorpusCompactions(t, msgs, 3)
			if len(run.summaries) == 0 {
				t.Fatal("no compaction ran")
			}
			text := run.recallText(t)
			low := strings.ToLower(text)
			// Every line of every replaced message.
			replacedTo := replacedTo(run.last)
			var replaced strings.Builder
			lines := 0
			for _, m := range run.stored {
				if m.Seq > replacedTo {
					break
				}
				for _, b := range m.Content {
					if b.Type != history.BlockText && b.Type != history.BlockThinking {
						continue
					}
					replaced.WriteString(b.Text + "\n")
					for _, l := range strings.Split(b.Text, "\n") {
						if l = strings.TrimSpace(l); l == "" {
							continue
						}
						lines++
						if !strings.Contains(text, l) {
							t.Fatalf("seq %d: line %q is in no recall file", m.Seq, l)
						}
					}
				}
			}
			// Every fact the replaced history holds (the lists were
			// written for summaries, so some name the retained tail).
			found, held := 0, 0
			for _, f := range ff.Facts {
				if !f.Kept(replaced.String()) && !f.Kept(originalText(msgs, run.stored, replacedTo)) {
					continue
				}
				held++
				if !f.Kept(low) {
					t.Errorf("fact %s (%v) is in the replaced history but not found in the recall files", f.ID, f.Any)
					continue
				}
				found++
			}
			t.Logf("%d compactions, %d recall bytes, %d lines checked, %d/%d facts of the replaced history found", len(run.summaries), len(text), lines, found, held)
		})
	}
}

// originalText is the text of the corpus messages up to seq to (msgs[i]
// was stored as stored[i]), tool inputs included, as the agent
// wrote them (before offloading).
func originalText(msgs, stored []history.Message, to uint64) string {
	var b strings.Builder
	for i, m := range msgs {
		if i >= len(stored) || stored[i].Seq > to {
			break
		}
		for _, bl := range m.Content {
			b.WriteString(bl.Text)
			b.Write(bl.Input)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Repeated compaction holds (docs/design.md §5.3): over 3 and 5 successive
// compactions of each corpus session with a fact list (facttest.Cuts: 5 in
// every session but the 8-message pi recording, 4), every fact of the
// first segment (the messages the first summary replaced) is still in the
// last summary and in the recall files its footer names, no summary drops
// a fact of the list the one before it kept, the summary stays within the
// extractive budget plus the recall footer and does not collapse (never
// under half the first summary's size). CTXD_DUMP_SUMMARIES=dir writes
// every summary there.
func TestFactsSurviveRepeatedCompaction(t *testing.T) {
	for _, n := range []int{3, 5} {
		var allKept, allTotal float64
		for _, ff := range facttest.Load(t) {
			t.Run(ff.Session+"/"+string(rune('0'+n)), func(t *testing.T) {
				if raceEnabled && ff.Large() {
					t.Skip("a large corpus session: minutes under the race detector")
				}
				pts := facttest.Points(t, ff.Session)
				msgs := pts[len(pts)-1].Msgs
				run := runCorpusCompactions(t, msgs, n)
				// Every cut compacts: n of them but in a session with
				// fewer places to compact (facttest.WantCuts).
				if want := facttest.WantCuts(ff.Session, n); len(run.summaries) != want {
					t.Fatalf("%d compactions, want %d", len(run.summaries), want)
				}
				first, last := run.summaries[0], run.summaries[len(run.summaries)-1]
				if dir := os.Getenv("CTXD_DUMP_SUMMARIES"); dir != "" {
					for i, s := range run.summaries {
						name := fmt.Sprintf("%s.%d.%d.md", strings.NewReplacer("/", "_").Replace(ff.Session), n, i+1)
						_ = os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)
					}
				}
				// The first segment: what the first summary replaced, as
				// stored and as the agent wrote it.
				to := replacedTo(run.cps[0])
				var seg strings.Builder
				for _, m := range run.stored {
					if m.Seq > to {
						break
					}
					for _, b := range m.Content {
						seg.WriteString(b.Text + "\n")
					}
				}
				seg.WriteString(originalText(msgs, run.stored, to))
				recallText := strings.ToLower(run.recallText(t))
				var segFacts, inFirst, lostFirst, lostSeg []string
				var kept, total float64
				for _, f := range ff.Facts {
					if !f.Kept(seg.String()) {
						continue
					}
					segFacts = append(segFacts, f.ID)
					if !f.Kept(last) {
						lostSeg = append(lostSeg, f.ID)
						if !f.Kept(recallText) {
							t.Errorf("fact %s of the first segment is neither in the last summary nor in the recall files", f.ID)
						}
						t.Errorf("the last of %d summaries lacks first-segment fact %s", len(run.summaries), f.ID)
					}
					if !f.Kept(first) {
						continue
					}
					inFirst = append(inFirst, f.ID)
					total += f.Weight
					if f.Kept(last) {
						kept += f.Weight
					} else {
						lostFirst = append(lostFirst, f.ID)
					}
				}
				allKept, allTotal = allKept+kept, allTotal+total
				// No compaction drops a fact the summary before it kept.
				for i := 1; i < len(run.summaries); i++ {
					for _, f := range ff.Facts {
						if f.Kept(run.summaries[i-1]) && !f.Kept(run.summaries[i]) {
							t.Errorf("summary %d drops fact %s, which summary %d kept", i+1, f.ID, i)
						}
					}
				}
				sizes := make([]int, len(run.summaries))
				for i, s := range run.summaries {
					sizes[i] = len(s)
				}
				t.Logf("%d compactions, summary bytes %v; first segment: %d facts, %d in the first summary, %d of them in the last (lost %v); first-segment facts in the last summary: %d of %d (lost %v)",
					len(run.summaries), sizes, len(segFacts), len(inFirst), len(inFirst)-len(lostFirst), lostFirst, len(segFacts)-len(lostSeg), len(segFacts), lostSeg)
				if len(lostFirst) > 0 {
					t.Errorf("after %d compactions the last summary lost facts of the first segment the first summary kept: %v", len(run.summaries), lostFirst)
				}
				limit := int(summarizer.DefaultExtractiveBytes) + recallFooterMax
				for i, sz := range sizes {
					if sz > limit {
						t.Errorf("summary %d: %d bytes > %d", i+1, sz, limit)
					}
				}
				if len(last) < len(first)/2 {
					t.Errorf("the summary collapsed: %d bytes after %d compactions, %d after the first", len(last), len(run.summaries), len(first))
				}
			})
		}
		if raceEnabled {
			continue // the large sessions were left out
		}
		pct := 100 * allKept / max(allTotal, 1)
		t.Logf("%d compactions: %.1f %% of the first summaries' fact weight kept by the last ones", n, pct)
	}
}

// recallFooterMax bounds the recall paragraph ctxd appends to a summary
// (recall.Footer with the test's temporary paths), in bytes.
const recallFooterMax = 1024

// An LLM summary that copies the earlier summary's recall paragraph ends,
// like every summary, with this checkpoint's own: one "Full history"
// paragraph, naming this checkpoint's file.
func TestCopiedRecallParagraphIsReplaced(t *testing.T) {
	t.Setenv("CTXD_TEST_KEY", "test-key")
	f := newFakeAnthropic(t, okSummary("## Goal\nShip it.\n\n## Next steps\n- ship\n\n## Full history\nThe messages this summary replaced (seq 1–2) are in /old/recall-1-2.txt word for word."))
	dir := t.TempDir()
	cfg := recallConfig(dir)
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.append("s", user("ship it"), assistant(words(6000)), user("again"), assistant(words(6000)), user("last"), assistant("ok"))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	cp := h.fullCheckpoint("s", res.Checkpoint)
	if n := strings.Count(cp.Summary, summarizer.HeadingFullHistory); n != 1 || strings.Contains(cp.Summary, "/old/recall-1-2.txt") || footerPathRe.FindString(cp.Summary) == "" {
		t.Fatalf("%d recall paragraphs; summary:\n%s", n, cp.Summary)
	}
}
