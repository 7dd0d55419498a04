package summarizer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
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
