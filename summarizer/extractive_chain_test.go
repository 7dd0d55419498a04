package summarizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/facttest"
	"github.com/ctxd/ctxd/recall"
)

// TestCarriedNamesFirst: when the lines an earlier summary kept do not fit
// the carried section whole, every name they state is still there (names
// before wording): the paths by their file names, the identifiers, and a
// command by its head, so "bd close x.1" survives as a command, not only
// as its words. Long quotes carried before go first.
func TestCarriedNamesFirst(t *testing.T) {
	var lost []exPrevLine
	// Quotes carried by an earlier compaction: wording, few names.
	for i := range 6 {
		lost = append(lost, exPrevLine{prio: 0, text: fmt.Sprintf("> Let me check the render function once more, step %d, and then look at it again before going on with the plan.", i),
			missing: []string{"render"}})
	}
	var want []string
	for i := range 12 {
		file := fmt.Sprintf("lib/app/live/module_%02d_live.ex", i)
		ident := fmt.Sprintf("load_data_%02d", i)
		lost = append(lost, exPrevLine{prio: 3, text: fmt.Sprintf("- %s (writes ×2): +%s +helper_%02d", file, ident, i),
			missing: []string{file, ident}})
		want = append(want, fmt.Sprintf("module_%02d_live.ex", i), ident)
	}
	lost = append(lost, exPrevLine{prio: 2, text: "- `bd close spotter-dov.1 --reason=\"Extracted shared transcript computer and component.\"` (seq 84)",
		missing: []string{"bd close spotter-dov.1 --reason=\"Extracted shared transcript computer and component.\""}})
	want = append(want, "bd close spotter-dov.1")
	sortLost(lost)
	for _, max := range []int{700, 900, 1400} {
		s := carriedSection(lost, max)
		if len(s) > max {
			t.Fatalf("max %d: %d bytes", max, len(s))
		}
		for _, w := range want {
			if !strings.Contains(s, w) {
				t.Errorf("max %d: %q is not carried:\n%s", max, w, s)
			}
		}
	}
	// With room, lines are carried whole.
	if s := carriedSection(lost, 4000); !strings.Contains(s, "- lib/app/live/module_00_live.ex (writes ×2): +load_data_00") {
		t.Errorf("a line that fits is not carried whole:\n%s", s)
	}
	// The names line of one summary is read back by the next: a phrase
	// stays one name.
	s := carriedSection(lost, 700)
	names := s[strings.Index(s, exNamesLabel)+len(exNamesLabel):]
	if got := splitNames(names); !containsStr(got, "`bd close spotter-dov.1 --reason=\"Extracted`") {
		t.Errorf("the command phrase is not one name: %q", got)
	}
	again := lostLines("## Goal\nx\n\n"+HeadingCarried+"\n"+strings.TrimPrefix(s, "\n\n"+HeadingCarried+"\n")+"\n\n## Next steps\n- y\n", "## Goal\nx\n")
	var carried []string
	for _, pl := range again {
		if pl.names {
			carried = append(carried, pl.missing...)
		}
	}
	if !containsStr(carried, "`bd close spotter-dov.1 --reason=\"Extracted`") || !containsStr(carried, "load_data_11") {
		t.Errorf("the names line is not carried again as names: %q", carried)
	}
}

// sortLost orders lost lines as lostLines does.
func sortLost(lost []exPrevLine) {
	for i := 1; i < len(lost); i++ {
		for j := i; j > 0 && lost[j].prio < lost[j-1].prio; j-- {
			lost[j], lost[j-1] = lost[j-1], lost[j]
		}
	}
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestChainedFirstRequestOnce: the engine carries the first request before
// the earlier summary (docs/design.md §5.2); the new summary quotes it once,
// as the first request, never again as the latest substantive request.
func TestChainedFirstRequestOnce(t *testing.T) {
	text := func(r history.Role, s string) history.Message {
		return history.Message{Role: r, Content: []history.Block{{Type: history.BlockText, Text: s}}}
	}
	firstReq := "Work on bead spotter-dov. Run bd show spotter-dov to see the issue details and bd ready to find available subtasks."
	first := ExtractiveSummary([]history.Message{text(history.RoleUser, firstReq), text(history.RoleAssistant, "Looking at the bead now.")}, 0)
	msgs := []history.Message{
		text(history.RoleUser, firstReq),
		text(history.RoleUser, "This is a summary of the 2 earlier messages of this conversation.\n\n"+first),
		text(history.RoleUser, "continue"),
		text(history.RoleAssistant, "Continuing with the bead."),
	}
	s := ExtractiveSummary(msgs, 0)
	if n := strings.Count(s, "Work on bead spotter-dov."); n != 1 {
		t.Errorf("the first request is quoted %d times:\n%s", n, s)
	}
	if strings.Contains(s, "Latest substantive request") {
		t.Errorf("the carried first request is quoted again as the latest substantive one:\n%s", s)
	}
}

// chainPreamble stands for the engine's summary message preamble
// (engine.SummaryPreamble, docs/design.md §4).
const chainPreamble = "This is a summary of the %d earlier messages of this conversation, written when its context was compacted. The conversation continues after it."

// chainSummaries compacts msgs at each cut the way the engine shapes the
// summarizer's input after the first compaction (docs/design.md §5.2,
// §5.3): the first request carried beside the summary, the previous summary
// as a user message with its recall paragraph, then the messages since.
// It returns each summary as the engine stores it (with its recall
// paragraph).
func chainSummaries(msgs []history.Message, cuts []int, maxBytes uint64) []string {
	var first *history.Message
	for i := range msgs {
		if msgs[i].Role == history.RoleUser {
			first = &msgs[i]
			break
		}
	}
	var out []string
	prev, from := "", 0
	for _, c := range cuts {
		var in []history.Message
		if prev != "" {
			if first != nil {
				in = append(in, *first)
			}
			in = append(in, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText,
				Text: fmt.Sprintf(chainPreamble, from) + "\n\n" + prev}}})
		}
		rest := msgs[from:c]
		for len(rest) > 0 && rest[0].Role == history.RoleTool {
			rest = rest[1:]
		}
		in = append(in, rest...)
		s := strings.TrimRight(ExtractiveSummary(in, maxBytes), "\n")
		s += recall.Footer(fmt.Sprintf("/var/lib/ctxd/offload/s/%s", recall.FileName(uint64(from+1), uint64(c))), "/var/lib/ctxd/offload/s", uint64(from+1), uint64(c))
		out = append(out, s)
		prev, from = s, c
	}
	return out
}

// TestExtractiveHoldsOverCompactions: 3 and 5 successive compactions of
// every corpus session with a fact list (internal/facttest, shaped as the
// engine shapes the input after the first one; facttest.Cuts, so a short
// session compacts 5 times too): every fact of the first segment is in the
// last summary (issue: "facts from the first segment survive five
// compactions"), no summary drops a fact of the list the one before it
// kept, every summary stays within the budget plus its recall paragraph,
// and none collapses (each at least half the first one's size). The sizes
// and the first-segment facts the first summary left out are logged (-v).
func TestExtractiveHoldsOverCompactions(t *testing.T) {
	for _, n := range []int{3, 5} {
		for _, ff := range loadFacts(t) {
			t.Run(fmt.Sprintf("%s/%d", ff.Session, n), func(t *testing.T) {
				if raceEnabled && ff.Large() {
					t.Skip("a large corpus session: minutes under the race detector")
				}
				pts := factPoints(t, ff.Session)
				msgs := pts[len(pts)-1].Msgs
				cuts := facttest.Cuts(msgs, n)
				if want := facttest.WantCuts(ff.Session, n); len(cuts) != want {
					t.Fatalf("%d cuts, want %d", len(cuts), want)
				}
				sums := chainSummaries(msgs, cuts, 0)
				first, last := sums[0], sums[len(sums)-1]
				var inFirst, lostFirst, lostSeg []string
				seg := ff.FirstSegment(facttest.Text(msgs[:cuts[0]]))
				for _, f := range seg {
					if !f.Kept(last) {
						lostSeg = append(lostSeg, f.ID)
					}
					if f.Kept(first) {
						inFirst = append(inFirst, f.ID)
						if !f.Kept(last) {
							lostFirst = append(lostFirst, f.ID)
						}
					}
				}
				// No step drops a fact its earlier summary kept.
				for i := 1; i < len(sums); i++ {
					for _, f := range ff.Facts {
						if f.Kept(sums[i-1]) && !f.Kept(sums[i]) {
							t.Errorf("summary %d drops fact %s, which summary %d kept", i+1, f.ID, i)
						}
					}
				}
				sizes := make([]int, len(sums))
				for i, s := range sums {
					sizes[i] = len(s)
				}
				t.Logf("%d compactions, summary bytes %v; first segment: %d facts, %d in the first summary, %d of them in the last; first-segment facts not in the last: %v",
					len(sums), sizes, len(seg), len(inFirst), len(inFirst)-len(lostFirst), lostSeg)
				if len(lostFirst) > 0 {
					t.Errorf("the last of %d summaries lost first-segment facts the first kept: %v\n%s", len(sums), lostFirst, last)
				}
				if len(lostSeg) > 0 {
					t.Errorf("the last of %d summaries lacks first-segment facts %v", len(sums), lostSeg)
				}
				for i, s := range sums {
					body := s[:strings.Index(s, "\n\n"+HeadingFullHistory)]
					if uint64(len(body)) > DefaultExtractiveBytes {
						t.Errorf("summary %d: %d bytes before its recall paragraph > %d", i+1, len(body), DefaultExtractiveBytes)
					}
					if len(s) < len(first)/2 {
						t.Errorf("summary %d collapsed: %d bytes, the first %d", i+1, len(s), len(first))
					}
				}
			})
		}
	}
}

// TestBuiltinPromptCarriesForward: the LLM summarizer's prompt asks, when
// the conversation starts with an earlier summary, to carry forward what
// repeated compaction must not lose (docs/design.md §5.3) and never to drop
// a fact the earlier summary kept.
func TestBuiltinPromptCarriesForward(t *testing.T) {
	for _, want := range []string{
		"begins with an earlier checkpoint summary",
		"the first task and the goal in the user's words",
		"decisions with their reasons",
		"identifiers, paths and commands",
		"errors not yet resolved",
		"what was about to be done",
		"never drop a fact the earlier summary kept",
	} {
		if !strings.Contains(BuiltinPrompt, want) {
			t.Errorf("BuiltinPrompt lacks %q", want)
		}
	}
}

// TestExtractiveNamesAllAdded: a file whose edits added more names than its
// line lists gets the rest on a line of their own when the budget has room,
// so the first summary holds every name a later one must carry.
func TestExtractiveNamesAllAdded(t *testing.T) {
	var src strings.Builder
	var names []string
	for i := range 30 {
		n := fmt.Sprintf("handlePart%02d", i)
		names = append(names, n)
		fmt.Fprintf(&src, "func %s() {}\n", n)
	}
	in, _ := json.Marshal(map[string]string{"file_path": "/w/p/parts.go", "content": src.String()})
	msgs := []history.Message{
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "Write the part handlers."}}},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: "1", Name: "Write", Input: in}}},
		{Role: history.RoleTool, ToolCallID: "1", ToolName: "Write", Content: []history.Block{{Type: history.BlockText, Text: "ok"}}},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "Written."}}},
	}
	s := ExtractiveSummary(msgs, 0)
	for _, n := range names {
		if !strings.Contains(s, n) {
			t.Errorf("%s is not in the summary:\n%s", n, s)
		}
	}
	if !strings.Contains(s, "- also added to parts.go: ") {
		t.Errorf("no line of the names the file's line leaves out:\n%s", s)
	}
}

// TestCarriedFileWithSnippet: a modified file whose line names no added
// name, only what a small edit wrote (a one-line fix), stays a modified
// file with what was written in the next summary.
func TestCarriedFileWithSnippet(t *testing.T) {
	text := func(r history.Role, s string) history.Message {
		return history.Message{Role: r, Content: []history.Block{{Type: history.BlockText, Text: s}}}
	}
	first := text(history.RoleUser, "Fix the rounding of durations.")
	s1 := ExtractiveSummary([]history.Message{
		first,
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: "1", Name: "Edit",
			Input: json.RawMessage(`{"file_path":"/w/p/fields.py","old_string":"return int(td / unit)","new_string":"return int(round(td / unit))"}`)}}},
		{Role: history.RoleTool, ToolCallID: "1", ToolName: "Edit", Content: []history.Block{{Type: history.BlockText, Text: "ok"}}},
		text(history.RoleAssistant, "Rounded."),
	}, 0)
	if !strings.Contains(s1, "fields.py (writes ×1); wrote `return int(round(td / unit))`") {
		t.Fatalf("the first summary does not quote the edit:\n%s", s1)
	}
	s2 := ExtractiveSummary([]history.Message{
		first,
		text(history.RoleUser, fmt.Sprintf(chainPreamble, 4)+"\n\n"+s1),
		text(history.RoleUser, "Now run the tests."),
		text(history.RoleAssistant, "They pass."),
	}, 0)
	if !strings.Contains(s2, "fields.py (writes ×1") || !strings.Contains(s2, "int(round(td / unit))") {
		t.Errorf("the next summary lost the modified file or what was written:\n%s", s2)
	}
}
