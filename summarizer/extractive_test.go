package summarizer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
)

// corpusTranscripts lists every transcript of the shared corpus.
var corpusTranscripts = []string{
	"claude-code/autocompact-150tools.jsonl",
	"claude-code/autocompact-150tools.compaction-call.jsonl",
	"claude-code/v1-167tools-sidechains.jsonl",
	"pi/454tools-2compactions.jsonl",
	"swe-agent/marshmallow-1867.traj.json",
}

// TestExtractiveCorpus runs the extractive summarizer on every corpus
// transcript at several budgets: within max_summary_bytes, valid UTF-8,
// every heading present, deterministic; and through Summarize with no
// bindings (the no-configuration default) once its open rounds are closed.
func TestExtractiveCorpus(t *testing.T) {
	for _, rel := range corpusTranscripts {
		t.Run(rel, func(t *testing.T) {
			tr, err := transcript.Import(bytes.NewReader(corpustest.Read(t, rel)), transcript.Options{IncludeSidechains: true})
			if err != nil {
				t.Fatal(err)
			}
			msgs := tr.Messages
			for _, max := range []uint64{DefaultMaxSummaryBytes, 4096, 1200, 1} {
				s := ExtractiveSummary(msgs, max)
				if uint64(len(s)) > max {
					t.Errorf("max %d: summary is %d bytes", max, len(s))
				}
				if !utf8.ValidString(s) {
					t.Errorf("max %d: invalid UTF-8", max)
				}
				if max >= 1200 {
					for _, h := range Headings() {
						if !strings.Contains(s, "\n"+h+"\n") {
							t.Errorf("max %d: heading %q missing", max, h)
						}
					}
				}
				if max != 4096 {
					continue
				}
				if again := ExtractiveSummary(msgs, max); again != s {
					t.Errorf("max %d: not deterministic", max)
				}
			}
			full := ExtractiveSummary(msgs, DefaultMaxSummaryBytes)
			if testing.Verbose() && rel == "pi/454tools-2compactions.jsonl" {
				t.Logf("extractive summary of %s (%d bytes):\n%s", rel, len(full), full)
			}
			// The first user request is quoted verbatim (up to its budget);
			// text that is not a request (injected reminders, notices) is not.
			for i := range msgs {
				if msgs[i].Role == history.RoleUser {
					text := strings.TrimSpace(messageText(&msgs[i]))
					if first, req := requestText(text); text != "" && req && !isSummary(text) {
						line := truncateBytes(strings.SplitN(first, "\n", 2)[0], 100)
						if !strings.Contains(full, line) {
							t.Errorf("first request %q not quoted", line)
						}
						break
					}
				}
			}

			closed, _ := transcript.CloseAbandoned(msgs)
			req := Request{System: tr.System, Messages: closed, MaxSummaryBytes: 8192}
			before := cloneRequest(req)
			res, err := newTestSummarizer().Summarize(context.Background(), nil, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Binding != ProviderExtractive || len(res.Summary) > 8192 || res.Summary == "" {
				t.Errorf("default summarize: binding %q, %d bytes", res.Binding, len(res.Summary))
			}
			if !equalRequests(req, before) {
				t.Error("Summarize modified the request")
			}
		})
	}
}

func equalRequests(a, b Request) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// TestExtractiveContent checks what the summary says about a small history.
func TestExtractiveContent(t *testing.T) {
	req := sampleRequest()
	req.Messages = append(req.Messages,
		history.Message{Seq: 8, Role: history.RoleAssistant, Content: []history.Block{
			{Type: history.BlockToolCall, ID: "c4", Name: "edit", Input: json.RawMessage(`{"file_path":"pkg/foo/testdata/fixture.json","old":"","new":"{}"}`)},
			{Type: history.BlockToolCall, ID: "c5", Name: "bash", Input: json.RawMessage(`{"command":"go test ./pkg/foo/ && echo artifact://deadbeef"}`)},
		}},
		history.Message{Seq: 9, Role: history.RoleTool, ToolCallID: "c4", ToolName: "edit", Content: []history.Block{{Type: history.BlockText, Text: "ok"}}},
		history.Message{Seq: 10, Role: history.RoleTool, ToolCallID: "c5", ToolName: "bash", Content: []history.Block{{Type: history.BlockText, Text: "PASS"}}},
		history.Message{Seq: 11, Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "Now also update the changelog."}}},
	)
	s := ExtractiveSummary(req.Messages, 0)
	for _, want := range []string{
		"> Fix the failing test in pkg/foo.",                          // first request
		"> Now also update the changelog.",                            // latest request
		"- pkg/foo/testdata/fixture.json (writes ×1)",                 // modified
		"- pkg/foo/foo_test.go",                                       // read
		"`go test ./pkg/foo/`",                                        // command
		"artifact://abc123",                                           // artifact read path
		"artifact://deadbeef",                                         // artifact in a command
		"bash `go test ./pkg/foo/` (seq 6) failed: --- FAIL: TestFoo", // error
		"fixed: edited pkg/foo/testdata/fixture.json; then `go test ./pkg/foo/ && echo artifact://deadbeef` succeeded (seq 8)", // the change that fixed it
		"The test fails because the fixture is missing",     // decisions and reasoning
		"> Look at the test first.",                         // thinking
		"Last assistant message (seq 7):\n> The test fails", // the last message in full
		"Answer the latest user request (seq 11)",           // next steps
		"Tools used: bash ×2, read ×2, edit ×1.",            // counts
		"Open tool rounds: none.",                           // state
		"# Checkpoint summary (extractive, seq 1–11)",       // title
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "- artifact://abc123 (") || strings.Contains(s, "Read (3") {
		t.Errorf("artifact path listed as a file:\n%s", s)
	}

	// An open round is reported.
	open := ExtractiveSummary(req.Messages[:2], 0)
	if !strings.Contains(open, "Open tool rounds: 2 call(s) without a result") {
		t.Errorf("open round not reported:\n%s", open)
	}
}

// TestExtractiveChainsSummaries: a history that starts with an earlier
// checkpoint summary carries its goal forward.
func TestExtractiveChainsSummaries(t *testing.T) {
	req := sampleRequest()
	first := ExtractiveSummary(req.Messages, 0)
	chained := append([]history.Message{{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: first}}}},
		history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "Next: speed it up."}}})
	s := ExtractiveSummary(chained, 0)
	if !strings.Contains(s, "First request:\n> Fix the failing test in pkg/foo.") || !strings.Contains(s, "> Next: speed it up.") {
		t.Errorf("goal not carried:\n%s", s)
	}
	// Chained again and again: the first request stays quoted once, earlier
	// failures and files are carried, nothing nests or grows.
	prev := s
	for i := range 5 {
		next := []history.Message{{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: prev}}},
			{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: fmt.Sprintf("Step %d.", i)}}}}
		cur := ExtractiveSummary(next, 0)
		if n := strings.Count(cur, "Fix the failing test in pkg/foo."); n != 1 {
			t.Fatalf("round %d: the first request appears %d times:\n%s", i, n, cur)
		}
		if n := strings.Count(cur, exEarlier); n > len(Headings()) {
			t.Fatalf("round %d: %d carried blocks (nesting):\n%s", i, n, cur)
		}
		if !strings.Contains(cur, "TestFoo") {
			t.Fatalf("round %d: the earlier failure was dropped:\n%s", i, cur)
		}
		if i > 0 && len(cur) > len(prev)+200 {
			t.Fatalf("round %d: the summary grows (%d → %d bytes)", i, len(prev), len(cur))
		}
		prev = cur
	}
}

// TestExtractiveBudget: multi-byte text cut on code-point boundaries, never
// over the limit, at every small budget.
func TestExtractiveBudget(t *testing.T) {
	long := strings.Repeat("日本語のテキスト🙂 ", 3000)
	msgs := []history.Message{
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: long}}},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: long}}},
	}
	for max := uint64(1); max < 3000; max += 37 {
		s := ExtractiveSummary(msgs, max)
		if uint64(len(s)) > max || !utf8.ValidString(s) {
			t.Fatalf("max %d: %d bytes, valid %v", max, len(s), utf8.ValidString(s))
		}
	}
	s := ExtractiveSummary(msgs, 4000)
	if !strings.Contains(s, exCutMarker) {
		t.Error("a cut section carries no marker")
	}
}

func FuzzExtractiveSummary(f *testing.F) {
	f.Add("Fix it", "I will fix it because it is broken", `{"path":"a.go","command":"ls"}`, uint64(300))
	f.Add("日本語", "🙂", `{}`, uint64(1))
	f.Fuzz(func(t *testing.T, user, asst, input string, max uint64) {
		max %= 1 << 16
		msgs := []history.Message{
			{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: user}}},
			{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: asst},
				{Type: history.BlockToolCall, ID: "1", Name: "bash", Input: json.RawMessage(input)}}},
			{Role: history.RoleTool, ToolCallID: "1", IsError: true, Content: []history.Block{{Type: history.BlockText, Text: asst}}},
		}
		s := ExtractiveSummary(msgs, max)
		limit := max
		if limit == 0 {
			limit = DefaultMaxSummaryBytes
		}
		if uint64(len(s)) > limit {
			t.Fatalf("%d bytes > %d", len(s), limit)
		}
		if utf8.ValidString(user) && utf8.ValidString(asst) && utf8.ValidString(input) && !utf8.ValidString(s) {
			t.Fatal("invalid UTF-8 from valid input")
		}
	})
}

// TestExtractiveRequestSlots: text that is not a request (task
// notifications, system reminders, command caveats, injected skill text, a
// shell command the user ran) never fills the latest-request slot; a slash
// command is its name and arguments.
func TestExtractiveRequestSlots(t *testing.T) {
	user := func(s string) history.Message {
		return history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: s}}}
	}
	asst := func(s string) history.Message {
		return history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: s}}}
	}
	msgs := []history.Message{
		user("<command-message>review is running…</command-message>\n<command-name>/review</command-name>\n<command-args>the parser package</command-args>"),
		user("Review the code the user names. Report bugs first."),
		asst("Reviewing."),
		user("Also check the lexer for off-by-one errors in column numbers."),
		asst("Checking the lexer."),
		user("<task-notification>\n<task-id>b1</task-id>\n<status>completed</status>\n</task-notification>"),
		user("<system-reminder>The date changed.</system-reminder>"),
		user("Caveat: The messages below were generated by the user while running local commands. DO NOT respond to these messages."),
		user("Base directory for this skill: /home/dev/.claude/skills/pdf\n\nUse this skill to read PDFs."),
		user("Ran `ls`\n```\na.go\n```"),
	}
	s := ExtractiveSummary(msgs, 0)
	latest := sectionPart(sectionBody(s, HeadingGoal), "Latest request")
	if !strings.Contains(latest, "off-by-one errors in column numbers") {
		t.Errorf("latest request slot holds %q, want the lexer request:\n%s", latest, s)
	}
	if !strings.Contains(s, "> /review the parser package") {
		t.Errorf("the slash command is not the first request:\n%s", s)
	}
	for _, not := range []string{"task-notification>", "The date changed", "Caveat: The messages", "Use this skill"} {
		if strings.Contains(sectionBody(s, HeadingGoal), not) && !strings.Contains(sectionPart(sectionBody(s, HeadingGoal), exOriginalRequest), not) {
			t.Errorf("%q is quoted as a request:\n%s", not, s)
		}
	}
}

// TestExtractiveKeepsEarlyMilestonesAndFullPlan: a commit and an issue
// close early in a long run survive however many commands follow, and the
// last assistant message is kept in full, its plan included.
func TestExtractiveKeepsEarlyMilestonesAndFullPlan(t *testing.T) {
	var msgs []history.Message
	msgs = append(msgs, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "Work through the backlog."}}})
	cmds := []string{"git checkout -b backlog", "git commit -m 'fix: parser handles tabs'", "bd close ctx-12"}
	for i := range 40 {
		cmds = append(cmds, fmt.Sprintf("grep -rn pattern%d src/", i))
	}
	for i, c := range cmds {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs,
			history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: "Bash", Input: json.RawMessage(fmt.Sprintf(`{"command":%q}`, c))}}},
			history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "Bash", Content: []history.Block{{Type: history.BlockText, Text: "ok"}}})
	}
	plan := strings.Repeat("The parser fix is in and the lexer review found nothing else worth changing today. ", 5) +
		"\n\nNext steps:\n1. Rebase on main.\n2. Run the fuzz target for ten minutes.\n3. Close ctx-13 with a note."
	msgs = append(msgs, history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: plan}}})
	s := ExtractiveSummary(msgs, 0)
	for _, want := range []string{"git checkout -b backlog", "git commit -m 'fix: parser handles tabs'", "bd close ctx-12",
		"3. Close ctx-13 with a note.", "2. Run the fuzz target for ten minutes."} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// TestExtractiveRelativePaths: paths are written relative to the working
// directory the history states (a Codex environment context) or, failing
// that, the directory holding the files written.
func TestExtractiveRelativePaths(t *testing.T) {
	call := func(id, name, in string) []history.Message {
		return []history.Message{
			{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: name, Input: json.RawMessage(in)}}},
			{Role: history.RoleTool, ToolCallID: id, ToolName: name, Content: []history.Block{{Type: history.BlockText, Text: "ok"}}},
		}
	}
	var inferred []history.Message
	inferred = append(inferred, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "Fix it."}}})
	inferred = append(inferred, call("1", "Read", `{"file_path":"/home/dev/proj/README.md"}`)...)
	inferred = append(inferred, call("2", "Edit", `{"file_path":"/home/dev/proj/src/a.go","old_string":"x","new_string":"y"}`)...)
	inferred = append(inferred, call("3", "Write", `{"file_path":"/home/dev/proj/test/a_test.go","content":"package a"}`)...)
	inferred = append(inferred, call("4", "Read", `{"file_path":"/tmp/scratch.txt"}`)...)
	s := ExtractiveSummary(inferred, 0)
	for _, want := range []string{"Working directory: /home/dev/proj (paths below are relative to it)", "- src/a.go (", "- test/a_test.go (", "README.md", "/tmp/scratch.txt"} {
		if !strings.Contains(s, want) {
			t.Errorf("inferred: summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "/home/dev/proj/src") {
		t.Errorf("inferred: absolute path left:\n%s", s)
	}

	stated := append([]history.Message{{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText,
		Text: "<environment_context>\n  <cwd>/work/repo</cwd>\n</environment_context>"}}}}, inferred...)
	stated = append(stated, call("5", "Read", `{"file_path":"/work/repo/go.mod"}`)...)
	if s := ExtractiveSummary(stated, 0); !strings.Contains(s, "Working directory: /work/repo (") || !strings.Contains(s, "go.mod") || strings.Contains(s, "/work/repo/go.mod") {
		t.Errorf("stated: want paths relative to /work/repo:\n%s", s)
	}
}

// TestExtractiveBudgetConfigured: Summarize keeps the extractive summary
// within extractive_summary_bytes, and within max_summary_bytes when that
// is smaller.
func TestExtractiveBudgetConfigured(t *testing.T) {
	tr, err := transcript.Import(bytes.NewReader(corpustest.Read(t, "pi/454tools-2compactions.jsonl")), transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	closed, _ := transcript.CloseAbandoned(tr.Messages)
	for _, tc := range []struct{ extractive, max, want uint64 }{
		{0, 0, DefaultExtractiveBytes},
		{4096, 0, 4096},
		{20000, 0, 20000},
		{20000, 2048, 2048},
	} {
		res, err := newTestSummarizer().Summarize(context.Background(), nil,
			Request{Messages: closed, ExtractiveBytes: tc.extractive, MaxSummaryBytes: tc.max}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := uint64(len(res.Summary)); n > tc.want || n < tc.want*8/10 {
			t.Errorf("extractive %d, max %d: %d bytes, want at most %d and close to it", tc.extractive, tc.max, n, tc.want)
		}
	}
}

// TestExtractiveTitleNamesTheSeqRange: the title names the seqs
// read and no message count, since the messages read (previous summary,
// recent ones retention may keep) are not what the checkpoint records as
// summarized.
func TestExtractiveTitleNamesTheSeqRange(t *testing.T) {
	msgs := []history.Message{
		{Seq: 4, Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "fix the build"}}},
		{Seq: 5, Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockText, Text: "on it"}}},
	}
	title, _, _ := strings.Cut(ExtractiveSummary(msgs, 0), "\n")
	if title != "# Checkpoint summary (extractive, seq 4–5)" {
		t.Fatalf("title %q", title)
	}
}
