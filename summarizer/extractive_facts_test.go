package summarizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/facttest"
)

// loadFacts reads the fact lists (internal/facttest).
func loadFacts(t *testing.T) []*facttest.File { return facttest.Load(t) }

// factPoints are the points of a corpus session (internal/facttest).
func factPoints(t *testing.T, rel string) []facttest.Point { return facttest.Points(t, rel) }

// TestExtractiveKeepsFacts: on every shared-corpus session with a fact
// file, the extractive summary at the default budget, where the original
// agent compacted and at the end, stays within the budget and keeps at
// least the file's share of the facts by weight. The original agent's own
// LLM summary, where the corpus has one, is scored on the same facts as a
// reference (logged with -v).
func TestExtractiveKeepsFacts(t *testing.T) {
	for _, ff := range loadFacts(t) {
		t.Run(ff.Session, func(t *testing.T) {
			for _, pt := range factPoints(t, ff.Session) {
				s := ExtractiveSummary(pt.Msgs, 0)
				if uint64(len(s)) > DefaultExtractiveBytes {
					t.Errorf("%s: %d bytes > budget %d", pt.Name, len(s), DefaultExtractiveBytes)
				}
				pct, lost := ff.Score(pt.Name, s)
				line := fmt.Sprintf("%s: extractive %d bytes, %.0f %% of facts", pt.Name, len(s), pct)
				if pt.LLM != "" {
					lpct, llost := ff.Score(pt.Name, pt.LLM)
					line += fmt.Sprintf("; LLM summary %d bytes, %.0f %% (lost %v)", len(pt.LLM), lpct, llost)
					// The same facts at the LLM summary's own size.
					at := ExtractiveSummary(pt.Msgs, uint64(len(pt.LLM)))
					apct, alost := ff.Score(pt.Name, at)
					line += fmt.Sprintf("; extractive at the LLM's %d bytes: %d bytes, %.0f %% (lost %v)", len(pt.LLM), len(at), apct, alost)
				}
				t.Logf("%s; lost %v", line, lost)
				if pct < ff.MinPercent {
					t.Errorf("%s: kept %.1f %% < %.0f %%; lost %v", pt.Name, pct, ff.MinPercent, lost)
				}
				if dir := os.Getenv("CTXD_DUMP_SUMMARIES"); dir != "" {
					name := strings.NewReplacer("/", "_").Replace(ff.Session) + "." + pt.Name + ".md"
					_ = os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)
				}
			}
		})
	}
}

// TestExtractiveFixIsApplied: a failure's fix is the change that was
// applied before the same action succeeded, never the plan stated in
// thinking or text, and never an edit that itself failed.
func TestExtractiveFixIsApplied(t *testing.T) {
	text := func(s string) []history.Block { return []history.Block{{Type: history.BlockText, Text: s}} }
	call := func(id, name, input string) history.Block {
		return history.Block{Type: history.BlockToolCall, ID: id, Name: name, Input: json.RawMessage(input)}
	}
	res := func(id, name, out string, isErr bool) history.Message {
		return history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: name, IsError: isErr, Content: text(out)}
	}
	msgs := []history.Message{
		{Role: history.RoleUser, Content: text("Fix the build.")},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockThinking, Text: "I'll rename Foo to Bar in a.go."}, call("1", "Bash", `{"command":"go build ./..."}`)}},
		res("1", "Bash", "./b.go:3: undefined: Baz", true),
		{Role: history.RoleAssistant, Content: []history.Block{
			{Type: history.BlockThinking, Text: "The fix is to define Baz in b.go."},
			{Type: history.BlockText, Text: "I will define Baz in b.go."},
			call("2", "Edit", `{"file_path":"/w/p/d.go","old_string":"x","new_string":"func Nope() {}"}`)}},
		res("2", "Edit", "old_string not found", true),
		{Role: history.RoleAssistant, Content: []history.Block{call("3", "Edit", `{"file_path":"/w/p/c.go","old_string":"// todo","new_string":"func Baz() int { return 1 }"}`)}},
		res("3", "Edit", "ok", false),
		{Role: history.RoleAssistant, Content: []history.Block{call("4", "Bash", `{"command":"go build ./..."}`)}},
		res("4", "Bash", "", false),
		{Role: history.RoleAssistant, Content: text("Built.")},
	}
	s := ExtractiveSummary(msgs, 0)
	// The line after the failure is its fix.
	lines := strings.Split(s, "\n")
	build := ""
	for k, l := range lines {
		if strings.Contains(l, "undefined: Baz") && k+1 < len(lines) {
			build = lines[k+1]
		}
	}
	if !strings.Contains(build, "fixed:") {
		t.Fatalf("no fix stated for the build failure:\n%s", s)
	}
	if !strings.Contains(build, "edited /w/p/c.go (+Baz)") && !strings.Contains(build, "edited c.go (+Baz)") {
		t.Errorf("the build fix does not name the applied edit: %q\n%s", build, s)
	}
	for _, bad := range []string{"b.go", "a.go", "rename", "d.go", "Nope", "define Baz"} {
		if strings.Contains(build, bad) {
			t.Errorf("the build fix states %q, which was planned or failed, not applied: %q", bad, build)
		}
	}
}

// exFixedEditRe finds the files a "fixed:" line says were edited.
var exFixedEditRe = regexp.MustCompile(`edited (\S+?)(?: \(|;|$)`)

// TestExtractiveCorpusFixesApplied: on every corpus point, each file a
// "fixed:" line names as edited was written by a successful call.
func TestExtractiveCorpusFixesApplied(t *testing.T) {
	for _, ff := range loadFacts(t) {
		t.Run(ff.Session, func(t *testing.T) {
			for _, pt := range factPoints(t, ff.Session) {
				x := newExtraction(pt.Msgs)
				written := map[string]bool{}
				for _, c := range x.calls {
					if c.done && !c.failed() && isWrite(c) {
						written[x.rel(editTarget(c))] = true
					}
				}
				s := ExtractiveSummary(pt.Msgs, 0)
				n := 0
				for _, l := range strings.Split(s, "\n") {
					if !strings.Contains(l, "fixed:") {
						continue
					}
					for _, m := range exFixedEditRe.FindAllStringSubmatch(l, -1) {
						n++
						if !written[m[1]] {
							t.Errorf("%s: fix names %q, which no successful call wrote: %s", pt.Name, m[1], l)
						}
					}
				}
				t.Logf("%s: %d edits named in fixes, all applied", pt.Name, n)
			}
		})
	}
}

// TestExtractiveKeepsFactsChained: ctxd compacts again and again; each
// summary after the first summarizes the previous summary and the messages
// since. At every point after the first, the chained summary keeps the
// facts at the file's share, like the summary of the whole history. A
// session whose original agent never compacted (one point, its end) is
// compacted at 3 places (facttest.Cuts) and its last summary scored there.
func TestExtractiveKeepsFactsChained(t *testing.T) {
	for _, ff := range loadFacts(t) {
		t.Run(ff.Session, func(t *testing.T) {
			pts := factPoints(t, ff.Session)
			if len(pts) < 2 {
				pt := pts[0]
				sums := chainSummaries(pt.Msgs, facttest.Cuts(pt.Msgs, 3), 0)
				s := sums[len(sums)-1]
				s = s[:strings.Index(s, "\n\n"+HeadingFullHistory)]
				pct, lost := ff.Score(pt.Name, s)
				t.Logf("%s (chained, %d compactions): %d bytes, %.0f %% of facts; lost %v", pt.Name, len(sums), len(s), pct, lost)
				if len(sums) != 3 {
					t.Errorf("%d compactions, want 3", len(sums))
				}
				if pct < ff.MinPercent {
					t.Errorf("%s (chained): kept %.1f %% < %.0f %%; lost %v", pt.Name, pct, ff.MinPercent, lost)
				}
				return
			}
			prev := ""
			from := 0
			for _, pt := range pts {
				var msgs []history.Message
				if prev != "" {
					msgs = append(msgs, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: prev}}})
				}
				// Points are prefixes of one history: continue after the
				// last one, from a closed round boundary.
				rest := pt.Msgs[from:]
				for len(rest) > 0 && rest[0].Role == history.RoleTool {
					rest = rest[1:]
				}
				msgs = append(msgs, rest...)
				s := ExtractiveSummary(msgs, 0)
				pct, lost := ff.Score(pt.Name, s)
				t.Logf("%s (chained): %d bytes, %.0f %% of facts; lost %v", pt.Name, len(s), pct, lost)
				if dir := os.Getenv("CTXD_DUMP_SUMMARIES"); dir != "" {
					name := strings.NewReplacer("/", "_").Replace(ff.Session) + "." + pt.Name + ".chained.md"
					_ = os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)
				}
				if uint64(len(s)) > DefaultExtractiveBytes {
					t.Errorf("%s (chained): %d bytes > budget %d", pt.Name, len(s), DefaultExtractiveBytes)
				}
				if pct < ff.MinPercent {
					t.Errorf("%s (chained): kept %.1f %% < %.0f %%; lost %v", pt.Name, pct, ff.MinPercent, lost)
				}
				prev, from = s, len(pt.Msgs)
			}
		})
	}
}
