package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// audit is the test's own pairing check: orphans are tool messages that do
// not answer an earlier, still-open call; unanswered are calls no tool
// message answers.
func audit(msgs []history.Message) (orphans []int, unanswered []string) {
	open := map[string]bool{}
	var order []string
	for i, m := range msgs {
		switch m.Role {
		case history.RoleAssistant:
			for _, c := range m.ToolCalls() {
				open[c.ID] = true
				order = append(order, c.ID)
			}
		case history.RoleTool:
			if !open[m.ToolCallID] {
				orphans = append(orphans, i)
			}
			delete(open, m.ToolCallID)
		}
	}
	for _, id := range order {
		if open[id] {
			unanswered = append(unanswered, id)
		}
	}
	return orphans, unanswered
}

type figures struct {
	format      string
	messages    int
	responses   int
	toolCalls   int
	results     int
	errors      int
	users       int
	compactions []OriginalCompaction // BeforeResponse, PreTokens, Trigger compared
	unanswered  []string
	model       string
	limit       uint64
}

func figuresOf(tr *Transcript) figures {
	f := figures{format: tr.Format, messages: len(tr.Messages), responses: tr.Responses,
		toolCalls: tr.ToolCalls, model: tr.Model, limit: tr.ContextLimit}
	for _, m := range tr.Messages {
		switch m.Role {
		case history.RoleTool:
			f.results++
			if m.IsError {
				f.errors++
			}
		case history.RoleUser:
			f.users++
		}
	}
	for _, c := range tr.OriginalCompactions {
		f.compactions = append(f.compactions, OriginalCompaction{BeforeResponse: c.BeforeResponse, PreTokens: c.PreTokens, Trigger: c.Trigger})
	}
	_, f.unanswered = audit(tr.Messages)
	return f
}

func importFile(t *testing.T, path string, opts Options) *Transcript {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	tr, err := Import(fh, opts)
	if err != nil {
		t.Fatalf("Import(%s): %v", path, err)
	}
	return tr
}

const codexFixture = "../testdata/transcript/codex/rollout-2025-10-14T09-12-00-kvstore.jsonl"

// TestImportFiles checks each importer on each corpus file (and the Codex
// fixture) against the figures of corpus/README.md, verified on the files.
func TestImportFiles(t *testing.T) {
	piUnanswered := []string{
		"toolu_0134E2F4jLV9HVUFhunmam8N",
		"toolu_01XfdvT2StjnLNw7MpkvVvJP", "toolu_01GBRsfbomRe6sBo32xf6hPK", "toolu_01G37VFJMMftUXQaqu3pHizc",
		"toolu_01571BXn2nSXvrR7sxVHAXXE",
		"toolu_01F2Xbizd52r1AuErXgFpR6W",
	}
	cases := []struct {
		name   string
		corpus string // relative to the corpus; "" for codexFixture
		opts   Options
		want   figures
	}{
		{"claude-code 2.x autocompact", "claude-code/autocompact-150tools.jsonl", Options{}, figures{
			format: FormatClaudeCode, messages: 292, responses: 139, toolCalls: 150, results: 150, errors: 5, users: 3,
			compactions: []OriginalCompaction{{BeforeResponse: 61, PreTokens: 170251, Trigger: "auto"}},
			model:       "claude-opus-4-6",
		}},
		{"claude-code 1.0 main", "claude-code/v1-167tools-sidechains.jsonl", Options{}, figures{
			format: FormatClaudeCode, messages: 23, responses: 9, toolCalls: 11, results: 11, users: 3,
			model: "claude-sonnet-4-20250514",
		}},
		{"claude-code 1.0 with sidechains", "claude-code/v1-167tools-sidechains.jsonl", Options{IncludeSidechains: true}, figures{
			format: FormatClaudeCode, messages: 345, responses: 170, toolCalls: 167, results: 167, errors: 23, users: 8,
			model: "claude-sonnet-4-20250514",
		}},
		{"claude-code sub-agent file", "claude-code/autocompact-150tools.compaction-call.jsonl", Options{}, figures{
			format: FormatClaudeCode, messages: 5, responses: 1, users: 4, model: "claude-opus-4-6",
		}},
		{"pi", "pi/454tools-2compactions.jsonl", Options{}, figures{
			// 58 user messages: 55 user + 3 bashExecution.
			format: FormatPi, messages: 990, responses: 484, toolCalls: 454, results: 448, errors: 12, users: 58,
			compactions: []OriginalCompaction{{BeforeResponse: 173, PreTokens: 175004}, {BeforeResponse: 303, PreTokens: 185014}},
			unanswered:  piUnanswered,
			model:       "claude-opus-4-5",
		}},
		{"swe-agent", "swe-agent/marshmallow-1867.traj.json", Options{}, figures{
			// 28 history entries: the system prompt goes to System.
			format: FormatSWEAgent, messages: 27, responses: 13, toolCalls: 13, results: 13, users: 1,
		}},
		{"codex fixture", "", Options{}, figures{
			format: FormatCodex, messages: 25, responses: 11, toolCalls: 9, results: 9, users: 5,
			compactions: []OriginalCompaction{{BeforeResponse: 9, PreTokens: 15030}},
			model:       "gpt-5.1-codex", limit: 272000,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := codexFixture
			if tc.corpus != "" {
				path = corpustest.Path(t, tc.corpus)
			}
			tr := importFile(t, path, tc.opts)
			got := figuresOf(tr)
			if !equalFigures(got, tc.want) {
				t.Errorf("figures:\n got %+v\nwant %+v", got, tc.want)
			}
			orphans, _ := audit(tr.Messages)
			if len(orphans) != 0 {
				t.Errorf("orphan tool results at %v", orphans)
			}
			if tr.Skipped != 0 {
				t.Errorf("Skipped = %d", tr.Skipped)
			}
			checkInvariants(t, tr)
			closed, n := CloseAbandoned(tr.Messages)
			if n != len(tc.want.unanswered) {
				t.Errorf("CloseAbandoned closed %d, want %d", n, len(tc.want.unanswered))
			}
			if o, u := audit(closed); len(o) != 0 || len(u) != 0 {
				t.Errorf("after CloseAbandoned: orphans %v, unanswered %v", o, u)
			}
		})
	}
}

func equalFigures(a, b figures) bool {
	return a.format == b.format && a.messages == b.messages && a.responses == b.responses &&
		a.toolCalls == b.toolCalls && a.results == b.results && a.errors == b.errors &&
		a.users == b.users && slices.Equal(a.compactions, b.compactions) &&
		slices.Equal(a.unanswered, b.unanswered) && a.model == b.model && a.limit == b.limit
}

// checkInvariants: roles and blocks of the canonical model, counts agree
// with the messages, tool names resolved, compaction positions in range.
func checkInvariants(t *testing.T, tr *Transcript) {
	t.Helper()
	responses, calls := 0, 0
	ids := map[string]bool{}
	for i, m := range tr.Messages {
		switch m.Role {
		case history.RoleAssistant:
			responses++
		case history.RoleTool:
			if m.ToolCallID == "" || m.ToolName == "" {
				t.Errorf("message %d: tool message without id or name: %+v", i, m)
			}
		case history.RoleUser:
			if len(m.Content) == 0 {
				t.Errorf("message %d: empty user message", i)
			}
		default:
			t.Errorf("message %d: role %q", i, m.Role)
		}
		if m.Role != history.RoleAssistant && m.Usage != nil {
			t.Errorf("message %d: usage on a %s message", i, m.Role)
		}
		for j, b := range m.Content {
			switch b.Type {
			case history.BlockText, history.BlockThinking, history.BlockRedactedThinking, history.BlockImage:
			case history.BlockToolCall:
				calls++
				if ids[b.ID] {
					t.Errorf("message %d: duplicate call id %s", i, b.ID)
				}
				ids[b.ID] = true
				if !json.Valid(b.Input) {
					t.Errorf("message %d block %d: invalid input JSON", i, j)
				}
			case history.BlockJSON:
				if !json.Valid(b.JSON) {
					t.Errorf("message %d block %d: invalid JSON", i, j)
				}
			default:
				t.Errorf("message %d block %d: type %q", i, j, b.Type)
			}
		}
	}
	if responses != tr.Responses || calls != tr.ToolCalls {
		t.Errorf("counted %d responses, %d calls; transcript says %d, %d", responses, calls, tr.Responses, tr.ToolCalls)
	}
	for _, c := range tr.OriginalCompactions {
		if c.MessageIndex < 0 || c.MessageIndex > len(tr.Messages) {
			t.Errorf("compaction index %d out of range", c.MessageIndex)
		}
		if c.Summary == "" && tr.Format != FormatCodex {
			t.Errorf("compaction without summary: %+v", c)
		}
	}
}

func TestClaudeCodeMergeAndUsage(t *testing.T) {
	tr := importFile(t, corpustest.Path(t, "claude-code/autocompact-150tools.jsonl"), Options{})
	// The first response is split over four lines (text, thinking,
	// tool_use, tool_use) with a tool result between the two calls.
	first := tr.Messages[1]
	var types []history.BlockType
	for _, b := range first.Content {
		types = append(types, b.Type)
	}
	want := []history.BlockType{history.BlockText, history.BlockThinking, history.BlockToolCall, history.BlockToolCall}
	if !slices.Equal(types, want) {
		t.Fatalf("first response blocks %v, want %v", types, want)
	}
	if first.Content[1].Signature == "" {
		t.Error("thinking signature lost")
	}
	if tr.Messages[2].ToolCallID != first.Content[2].ID || tr.Messages[3].ToolCallID != first.Content[3].ID || tr.Messages[2].ToolName != "Bash" {
		t.Errorf("results do not follow the merged response: %+v %+v", tr.Messages[2], tr.Messages[3])
	}
	// Usage taken once per response, from its last line (verified with
	// python on the file: 28,755 output tokens; 7,933 from first lines).
	var out uint64
	for _, m := range tr.Messages {
		if m.Usage != nil {
			out += m.Usage.OutputTokens
		}
	}
	if out != 28755 {
		t.Errorf("sum of output tokens %d, want 28755", out)
	}
	c := tr.OriginalCompactions[0]
	if !strings.HasPrefix(c.Summary, "This session is being continued") || c.MessageIndex != 132 {
		t.Errorf("compaction %+v", c)
	}
	for _, m := range tr.Messages {
		for _, b := range m.Content {
			if strings.HasPrefix(b.Text, "This session is being continued") {
				t.Error("the compact summary became a message")
			}
		}
	}
}

func TestClaudeCodeSidechainPlacement(t *testing.T) {
	tr := importFile(t, corpustest.Path(t, "claude-code/v1-167tools-sidechains.jsonl"), Options{IncludeSidechains: true})
	// No main-conversation round is split by a sub-agent's prompt: closing
	// abandoned rounds finds nothing.
	if _, n := CloseAbandoned(tr.Messages); n != 0 {
		t.Fatalf("%d calls open across a user message", n)
	}
}

func TestPiAbandoned(t *testing.T) {
	tr := importFile(t, corpustest.Path(t, "pi/454tools-2compactions.jsonl"), Options{})
	before := slices.Clone(tr.OriginalCompactions)
	n := tr.CloseAbandoned()
	if n != 6 {
		t.Fatalf("closed %d, want 6", n)
	}
	if o, u := audit(tr.Messages); len(o) != 0 || len(u) != 0 {
		t.Fatalf("orphans %v unanswered %v", o, u)
	}
	// The first compaction precedes every abandoned call; the second follows
	// five of them (the fifth is closed right before the user message that
	// follows the compaction, so it belongs before the compaction).
	if tr.OriginalCompactions[0].MessageIndex != before[0].MessageIndex ||
		tr.OriginalCompactions[1].MessageIndex != before[1].MessageIndex+5 {
		t.Errorf("compaction indexes %d,%d from %d,%d", tr.OriginalCompactions[0].MessageIndex,
			tr.OriginalCompactions[1].MessageIndex, before[0].MessageIndex, before[1].MessageIndex)
	}
	abandoned := 0
	for i, m := range tr.Messages {
		if m.Role == history.RoleTool && len(m.Content) == 1 && m.Content[0].Text == AbandonedText {
			abandoned++
			if !m.IsError || m.ToolName == "" {
				t.Errorf("message %d: %+v", i, m)
			}
			next := tr.Messages[i+1]
			if next.Role == history.RoleAssistant {
				t.Errorf("message %d: abandoned result not before a user message", i)
			}
		}
	}
	if abandoned != 6 {
		t.Errorf("%d abandoned results", abandoned)
	}
	// bashExecution is a user message with the command and output.
	found := false
	for _, m := range tr.Messages {
		if m.Role == history.RoleUser && strings.HasPrefix(m.Content[0].Text, "Ran `find .`") {
			found = true
		}
	}
	if !found {
		t.Error("bashExecution `find .` not imported")
	}
}

func TestSWEAgent(t *testing.T) {
	tr := importFile(t, corpustest.Path(t, "swe-agent/marshmallow-1867.traj.json"), Options{})
	if !strings.HasPrefix(tr.System, "SETTING: You are an autonomous programmer") {
		t.Errorf("System = %.40q", tr.System)
	}
	// The trajectory reuses call ids (call_5iDd… four times): later uses
	// are renamed, with their results.
	if tr.RenamedCallIDs != 4 {
		t.Errorf("RenamedCallIDs = %d, want 4", tr.RenamedCallIDs)
	}
	if m := tr.Messages[2]; m.ToolName != "bash" || m.ToolCallID != "call_9diWc1DYm4RLmPfHgIaP2wd" {
		t.Errorf("first result %+v", m)
	}
	if got := string(tr.Messages[1].Content[1].Input); got != `{"command":"ls -F"}` {
		t.Errorf("arguments %s", got)
	}
}

func TestCodexFixture(t *testing.T) {
	data, err := os.ReadFile(codexFixture)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ImportCodex(bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.System, "<permissions instructions>") {
		t.Errorf("developer message not in System: %q", tr.System)
	}
	// Response 2: reasoning + apply_patch; input 13,290 of which 11,776
	// cached.
	var second *history.Message
	n := 0
	for i := range tr.Messages {
		if tr.Messages[i].Role == history.RoleAssistant {
			if n++; n == 2 {
				second = &tr.Messages[i]
			}
		}
	}
	want := history.Usage{InputTokens: 1514, CacheReadInputTokens: 11776, OutputTokens: 164}
	if second.Usage == nil || *second.Usage != want {
		t.Errorf("usage %+v, want %+v", second.Usage, want)
	}
	if second.Content[0].Type != history.BlockThinking || second.Content[0].Signature == "" {
		t.Errorf("reasoning block %+v", second.Content[0])
	}
	if c := second.Content[1]; c.Name != "apply_patch" || !strings.HasPrefix(string(c.Input), `{"input":"*** Begin Patch`) {
		t.Errorf("custom tool call %+v", c)
	}
	// user_message events duplicate response_item messages: counted once.
	users := 0
	for _, m := range tr.Messages {
		if m.Role == history.RoleUser && strings.Contains(m.Content[0].Text, "Also add a Len method") {
			users++
		}
	}
	if users != 1 {
		t.Errorf("prompt imported %d times", users)
	}
	for _, m := range tr.Messages {
		if m.Role == history.RoleAssistant && m.Usage == nil {
			t.Errorf("response without usage: %+v", m)
		}
	}
}

func TestChatArrays(t *testing.T) {
	cases := []struct {
		name, in, format, system   string
		messages, responses, calls int
	}{
		{"anthropic", `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"a","name":"read","input":{"p":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}],"is_error":true},{"type":"text","text":"go on"}]}]`,
			FormatAnthropicMessages, "", 4, 1, 1},
		{"anthropic body", `{"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}`,
			FormatAnthropicMessages, "be brief", 2, 1, 0},
		{"openai", `[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"d\":\".\"}"}},{"id":"c2","type":"function","function":{"name":"cat","arguments":"not json"}}]},{"role":"tool","tool_call_id":"c1","content":"a b"},{"role":"tool","tool_call_id":"c2","content":"x"},{"role":"assistant","content":"done"}]`,
			FormatOpenAIChat, "sys", 5, 2, 2},
		{"openai body", `{"model":"gpt-4o","messages":[{"role":"developer","content":"d"},{"role":"user","content":"hi"}]}`,
			FormatOpenAIChat, "d", 1, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Import(strings.NewReader(tc.in), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Format != tc.format || tr.System != tc.system || len(tr.Messages) != tc.messages ||
				tr.Responses != tc.responses || tr.ToolCalls != tc.calls {
				t.Errorf("got format %s system %q messages %d responses %d calls %d", tr.Format, tr.System, len(tr.Messages), tr.Responses, tr.ToolCalls)
			}
			if o, u := audit(tr.Messages); len(o)+len(u) != 0 {
				t.Errorf("orphans %v unanswered %v", o, u)
			}
			checkInvariants(t, tr)
		})
	}
	tr, _ := Import(strings.NewReader(cases[0].in), Options{})
	if m := tr.Messages[2]; m.Role != history.RoleTool || !m.IsError || m.ToolName != "read" || m.Content[1].MediaType != "image/png" {
		t.Errorf("tool result %+v", m)
	}
	if m := tr.Messages[3]; m.Role != history.RoleUser || m.Content[0].Text != "go on" {
		t.Errorf("user after results %+v", m)
	}
	tr, _ = Import(strings.NewReader(cases[2].in), Options{})
	// Unparsable arguments are kept as a string, wrapped in the object
	// providers require.
	if in := string(tr.Messages[1].Content[1].Input); in != `{"input":"not json"}` {
		t.Errorf("unparsable arguments kept as %s", in)
	}
	if img := tr.Messages[0].Content[1]; img.Type != history.BlockImage || img.MediaType != "image/jpeg" || img.Data != "/9j/" {
		t.Errorf("image %+v", img)
	}
}

// ccLines builds a Claude Code JSONL from compact line specs.
func ccLines(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func TestClaudeCodeShapes(t *testing.T) {
	in := ccLines(
		`{"type":"file-history-snapshot","messageId":"x","snapshot":{}}`,
		`{"type":"user","sessionId":"s","uuid":"1","message":{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}}`,
		`{"type":"assistant","sessionId":"s","uuid":"2","message":{"id":"m1","model":"claude-x","role":"assistant","content":[{"type":"redacted_thinking","data":"ENC"}],"usage":{"input_tokens":5,"output_tokens":1}}}`,
		`{"type":"assistant","sessionId":"s","uuid":"3","message":{"id":"m1","model":"claude-x","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Task","input":{}}],"usage":{"input_tokens":5,"output_tokens":9}}}`,
		`{"type":"user","sessionId":"s","uuid":"4","isSidechain":true,"message":{"role":"user","content":"sub prompt"}}`,
		`{"type":"assistant","sessionId":"s","uuid":"5","isSidechain":true,"message":{"id":"m2","model":"claude-x","role":"assistant","content":[{"type":"text","text":"sub answer"}]}}`,
		`{"type":"progress","data":{}}`,
		`{"type":"user","sessionId":"s","uuid":"6","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done"},{"type":"text","text":"and now?"}]}}`,
		`{"type":"system","subtype":"compact_boundary","sessionId":"s","compactMetadata":{"trigger":"manual","preTokens":42}}`,
		`{"type":"user","sessionId":"s","uuid":"7","isCompactSummary":true,"message":{"role":"user","content":"SUMMARY"}}`,
		`{"type":"assistant","sessionId":"s","uuid":"8","message":{"id":"m3","model":"claude-y","role":"assistant","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":3,"cache_read_input_tokens":40,"output_tokens":2}}}`,
	)
	tr, err := Import(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	roles := func(tr *Transcript) string {
		var s []string
		for _, m := range tr.Messages {
			s = append(s, string(m.Role))
		}
		return strings.Join(s, ",")
	}
	if got := roles(tr); got != "user,assistant,tool,user,assistant" {
		t.Fatalf("roles %s", got)
	}
	if u := tr.Messages[1].Usage; u == nil || u.OutputTokens != 9 {
		t.Errorf("merged usage %+v, want the last line's", u)
	}
	if b := tr.Messages[1].Content[0]; b.Type != history.BlockRedactedThinking || b.Data != "ENC" {
		t.Errorf("redacted_thinking %+v", b)
	}
	if b := tr.Messages[0].Content[1]; b.Type != history.BlockImage || b.MediaType != "image/png" || b.Data != "AAAA" {
		t.Errorf("image %+v", b)
	}
	want := OriginalCompaction{BeforeResponse: 1, MessageIndex: 4, PreTokens: 42, Summary: "SUMMARY", Trigger: "manual"}
	if len(tr.OriginalCompactions) != 1 || tr.OriginalCompactions[0] != want {
		t.Errorf("compactions %+v", tr.OriginalCompactions)
	}
	if tr.Model != "claude-y" {
		t.Errorf("model %s", tr.Model)
	}
	// With sidechains the sub-agent's messages wait until the Task call is
	// answered.
	tr, err = Import(strings.NewReader(in), Options{IncludeSidechains: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := roles(tr); got != "user,assistant,tool,user,assistant,user,assistant" {
		t.Fatalf("roles with sidechains %s", got)
	}
	if tr.Messages[3].Content[0].Text != "sub prompt" || tr.Messages[5].Content[0].Text != "and now?" {
		t.Errorf("sidechain order: %+v", tr.Messages)
	}
}

func TestMalformed(t *testing.T) {
	piOK := `{"type":"session","id":"x","modelId":"m"}`
	piUser := `{"type":"message","message":{"role":"user","content":"hi"}}`
	ccOK := `{"type":"user","sessionId":"s","message":{"role":"user","content":"hi"}}`
	cxOK := `{"timestamp":"2025-01-01T00:00:00Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}`
	cases := []struct {
		name    string
		format  string // "" = detect
		in      string
		line    int   // want *MalformedError.Line (0: none)
		offset  int64 // want Offset when line is 0 and isMal
		isMal   bool
		is      error // else errors.Is
		skipped int   // with SkipMalformed (-1: still an error)
	}{
		{"empty", "", "", 0, 0, false, ErrEmpty, -1},
		{"blank", "", " \n\t\n", 0, 0, false, ErrEmpty, -1},
		{"not json", "", "hello", 0, 0, false, ErrUnknownFormat, -1},
		{"unknown jsonl", "", `{"a":1}` + "\n", 0, 0, false, ErrUnknownFormat, -1},
		{"pi bad line 3", "", piOK + "\n" + piUser + "\n{oops\n" + piUser + "\n", 3, 0, true, nil, 1},
		{"pi truncated line", "", piOK + "\n" + piUser + "\n" + `{"type":"message","mess` + "\n" + piUser + "\n", 3, 0, true, nil, 1},
		{"pi wrong type", FormatPi, piOK + "\n" + piUser + "\n" + `{"type":"message","message":{"role":"assistant","content":5}}` + "\n", 3, 0, true, nil, 1},
		{"pi only progress", FormatPi, piOK + "\n", 0, 0, false, ErrNoMessages, -1},
		{"claude bad line 2 after blank", "", ccOK + "\n\n[1,2\n" + ccOK, 3, 0, true, nil, 1},
		{"claude content number", FormatClaudeCode, ccOK + "\n" + `{"type":"user","message":{"role":"user","content":7}}`, 2, 0, true, nil, 1},
		{"claude no message", FormatClaudeCode, ccOK + "\n" + `{"type":"assistant"}`, 2, 0, true, nil, 1},
		{"claude tool_result content bad", FormatClaudeCode, ccOK + "\n" + `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":3}]}}`, 2, 0, true, nil, 1},
		{"codex bad payload", "", cxOK + "\n" + `{"timestamp":"x","type":"response_item","payload":{"type":"message","role":"user","content":{}}}`, 2, 0, true, nil, 1},
		{"codex call without id", FormatCodex, cxOK + "\n" + `{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}"}}`, 2, 0, true, nil, 1},
		{"codex crlf", FormatCodex, cxOK + "\r\n" + cxOK + "\r\n{\r\n", 3, 0, true, nil, 1},
		{"array syntax", "", `[{"role":"user","content":"hi"},{"role":]`, 0, 39, true, nil, -1},
		{"array element type", "", `[{"role":"user","content":"hi"}, {"role":"user","content":5}]`, 0, 33, true, nil, 1},
		{"array unknown role", FormatAnthropicMessages, `[{"role":"user","content":"hi"},{"role":"robot","content":"x"}]`, 0, 32, true, nil, 1},
		{"array trailing data", FormatOpenAIChat, `[{"role":"user","content":"hi"}] x`, 0, 32, true, nil, -1},
		{"openai tool without id", FormatOpenAIChat, `[{"role":"user","content":"hi"},{"role":"tool","content":"x"}]`, 0, 32, true, nil, 1},
		{"swe-agent bad entry", FormatSWEAgent, `{"history":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":5}]}`, 0, 43, true, nil, 1},
		{"swe-agent no history", FormatSWEAgent, `{"trajectory":[]}`, 0, 0, true, nil, -1},
		{"unknown format name", "yaml", `{}`, 0, 0, false, ErrUnknownFormat, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := func(opts Options) (*Transcript, error) {
				if tc.format == "" {
					return Import(strings.NewReader(tc.in), opts)
				}
				return ImportFormat(strings.NewReader(tc.in), tc.format, opts)
			}
			_, err := run(Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if tc.isMal {
				var me *MalformedError
				if !errors.As(err, &me) || !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v is not a MalformedError", err)
				}
				if me.Line != tc.line || (tc.line == 0 && me.Offset != tc.offset) {
					t.Errorf("error %q: line %d offset %d, want line %d offset %d", err, me.Line, me.Offset, tc.line, tc.offset)
				}
				if tc.line > 0 && !strings.Contains(err.Error(), "line ") {
					t.Errorf("error %q does not name the line", err)
				}
			} else if !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want %v", err, tc.is)
			}
			tr, err := run(Options{SkipMalformed: true})
			if tc.skipped < 0 {
				if err == nil {
					t.Error("SkipMalformed: no error")
				}
				return
			}
			if err != nil {
				t.Fatalf("SkipMalformed: %v", err)
			}
			if tr.Skipped != tc.skipped {
				t.Errorf("Skipped = %d, want %d", tr.Skipped, tc.skipped)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	cases := []struct{ in, want string }{
		{"\xef\xbb\xbf" + `{"type":"session","id":"x"}`, FormatPi},
		{`{"type":"summary","summary":"s","leafUuid":"u"}`, FormatClaudeCode},
		{`{"timestamp":"t","type":"session_meta","payload":{}}`, FormatCodex},
		{`{"history":[],"info":{}}`, FormatSWEAgent},
		{`[{"role":"user","content":"x"}]`, FormatAnthropicMessages},
		{`[{"role":"tool","content":"x","tool_call_id":"a"}]`, FormatOpenAIChat},
		{"  \n" + `{"type":"message","message":{"role":"toolResult"}}`, FormatPi},
	}
	for _, tc := range cases {
		got, err := Detect([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("Detect(%.40q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCloseAbandoned(t *testing.T) {
	call := func(ids ...string) history.Message {
		m := history.Message{Role: history.RoleAssistant}
		for _, id := range ids {
			m.Content = append(m.Content, history.Block{Type: history.BlockToolCall, ID: id, Name: "n" + id, Input: json.RawMessage("{}")})
		}
		return m
	}
	res := func(id string) history.Message { return history.Message{Role: history.RoleTool, ToolCallID: id} }
	user := history.Message{Role: history.RoleUser, Content: []history.Block{textBlock("u")}}
	msgs := []history.Message{user, call("a", "b"), res("a"), user, call("c"), res("c"), call("d")}
	out, n := CloseAbandoned(msgs)
	if n != 2 || len(out) != 9 || len(msgs) != 7 {
		t.Fatalf("n=%d len=%d", n, len(out))
	}
	if m := out[3]; m.ToolCallID != "b" || m.ToolName != "nb" || !m.IsError || m.Content[0].Text != AbandonedText || out[4].Role != history.RoleUser {
		t.Errorf("inserted %+v", m)
	}
	if m := out[8]; m.ToolCallID != "d" {
		t.Errorf("at the end %+v", m)
	}
	if _, n := CloseAbandoned(out); n != 0 {
		t.Errorf("second pass closed %d", n)
	}
	if _, n := CloseAbandoned(nil); n != 0 {
		t.Error("nil")
	}
}

// --- fuzzing: arbitrary bytes never panic ---

func fuzzSeeds(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("[]"))
	f.Add([]byte(`[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}]}]`))
	f.Add([]byte(`[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"x","arguments":{"k":1}}}]},{"role":"tool","tool_call_ids":["a","a"]}]`))
	f.Add([]byte(`{"history":[{"role":"system","content":[{"type":"text","text":"s"}]}]}`))
	f.Add([]byte(ccLines(`{"type":"assistant","sessionId":"s","message":{"id":"m","content":[{"type":"tool_use","id":"t","input":null}]}}`,
		`{"type":"user","sessionId":"s","isSidechain":true,"message":{"content":"x"}}`,
		`{"type":"system","subtype":"compact_boundary","sessionId":"s"}`,
		`{"type":"user","sessionId":"s","isCompactSummary":true,"message":{"content":[{"type":"text","text":"S"}]}}`)))
	f.Add([]byte(ccLines(`{"type":"assistant","sessionId":"s","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]}}`,
		`{"type":"queue-operation","operation":"enqueue","sessionId":"s","content":"more"}`,
		`{"type":"queue-operation","operation":"remove","sessionId":"s"}`,
		`{"type":"queue-operation","operation":"enqueue","sessionId":"s","content":{"not":"text"}}`,
		`{"type":"queue-operation","operation":"popAll","sessionId":"s"}`,
		`{"type":"user","sessionId":"s","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}}`)))
	f.Add([]byte(ccLines(`{"type":"session","id":"x"}`, `{"type":"message","message":{"role":"bashExecution","command":"ls","exitCode":2,"truncated":true}}`,
		`{"type":"compaction","tokensBefore":3,"summary":"s"}`, `{"type":"message","message":{"role":"toolResult","toolCallId":"q"}}`)))
	f.Add([]byte(ccLines(`{"type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":1,"cached_input_tokens":9}}}}`,
		`{"type":"response_item","payload":{"type":"reasoning","encrypted_content":"e"}}`,
		`{"type":"response_item","payload":{"type":"function_call_output","call_id":"c","output":{"content":[{"type":"input_image","image_url":"data:;base64,"}],"success":false}}}`,
		`{"type":"compacted","payload":{"message":"m"}}`)))
	if data, err := os.ReadFile(codexFixture); err == nil {
		f.Add(data)
	}
	// The shapes of more agents' files: mini-swe-agent, a Responses body, glued
	// records, an OpenHands event array.
	f.Add([]byte(miniTraj))
	f.Add([]byte(`{"instructions":"i","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]}`))
	f.Add([]byte(`{"type":"session","id":"x"}{"type":"message","message":{"role":"user","content":"hi"}}` + "\n" + `{"type":"message","message":{"role":"assistant","content":[{"type":"thinking","thinking":"t"}]}}{"type":"mess`))
	f.Add([]byte(`[{"id":0,"source":"user","action":"message","args":{}}]`))
}

func FuzzImportMiniSWEAgent(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return ImportFormat(bytes.NewReader(b), FormatMiniSWEAgent, Options{SkipMalformed: true})
	})
}

func FuzzImportResponses(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return ImportFormat(bytes.NewReader(b), FormatOpenAIResponses, Options{SkipMalformed: true})
	})
}

func fuzzImporter(f *testing.F, imp func([]byte) (*Transcript, error)) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := imp(data)
		if err != nil {
			return
		}
		if len(tr.Messages) == 0 {
			t.Fatal("success without messages")
		}
		if _, n := CloseAbandoned(tr.Messages); n != tr.CloseAbandoned() {
			t.Fatal("CloseAbandoned and the method disagree")
		}
	})
}

func FuzzImport(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return Import(bytes.NewReader(b), Options{IncludeSidechains: len(b)%2 == 0, SkipMalformed: len(b)%3 == 0})
	})
}

func FuzzImportClaudeCode(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return ImportClaudeCode(bytes.NewReader(b), Options{IncludeSidechains: len(b)%2 == 0, SkipMalformed: true})
	})
}

func FuzzImportPi(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) { return ImportPi(bytes.NewReader(b), Options{SkipMalformed: true}) })
}

func FuzzImportCodex(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return ImportCodex(bytes.NewReader(b), Options{SkipMalformed: true})
	})
}

func FuzzImportSWEAgent(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return ImportSWEAgent(bytes.NewReader(b), Options{SkipMalformed: true})
	})
}

func FuzzImportAnthropicMessages(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return ImportAnthropicMessages(bytes.NewReader(b), Options{SkipMalformed: true})
	})
}

func FuzzImportOpenAIChat(f *testing.F) {
	fuzzImporter(f, func(b []byte) (*Transcript, error) {
		return ImportOpenAIChat(bytes.NewReader(b), Options{SkipMalformed: true})
	})
}

// A live session file ends with the line the agent is writing: a cut last
// line that is not JSON yet is skipped and counted; the rest imports.
func TestCutLastLineIsSkipped(t *testing.T) {
	piOK := `{"type":"session","id":"x","modelId":"m"}`
	piUser := `{"type":"message","message":{"role":"user","content":"hi"}}`
	tr, err := Import(strings.NewReader(piOK+"\n"+piUser+"\n"+`{"type":"message","mess`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Skipped != 1 || len(tr.Messages) != 1 {
		t.Fatalf("skipped %d, messages %d", tr.Skipped, len(tr.Messages))
	}
	// A complete last line that is wrong is still an error.
	if _, err := Import(strings.NewReader(piOK+"\n"+piUser+"\n"+`{"type":"message","message":{"role":"assistant","content":5}}`), Options{}); err == nil {
		t.Fatal("a complete but invalid last line was accepted")
	}
}

func TestOpenAIContentImagesInBothShapes(t *testing.T) {
	raw := json.RawMessage(`[{"type":"input_text","text":"see"},` +
		`{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="},` +
		`{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/"}},` +
		`{"type":"image_url","image_url":{"url":"https://example.com/x.png"}}]`)
	blocks, err := openAIContent(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 4 || blocks[1].Type != history.BlockImage || blocks[1].MediaType != "image/png" ||
		blocks[2].Type != history.BlockImage || blocks[2].MediaType != "image/jpeg" || blocks[3].Type != history.BlockJSON {
		t.Fatalf("blocks = %+v", blocks)
	}
}

// TestClaudeCodeQueueOperation: a message the user typed while the agent
// worked (queue-operation enqueue) is imported as a user message where it
// was delivered: after the tool round open at the time, once. A dequeued
// message is carried by the next prompt line; popAll returns messages to
// the input box to be edited (never delivered as they were); a later user
// line with the same text is its delivery.
func TestClaudeCodeQueueOperation(t *testing.T) {
	asst := func(uuid, id, content string) string {
		return `{"type":"assistant","sessionId":"s","uuid":"` + uuid + `","message":{"id":"` + id + `","model":"claude-x","role":"assistant","content":` + content + `}}`
	}
	in := ccLines(
		`{"type":"queue-operation","operation":"enqueue","sessionId":"s","content":"first task"}`,
		`{"type":"queue-operation","operation":"dequeue","sessionId":"s"}`,
		`{"type":"user","sessionId":"s","uuid":"1","message":{"role":"user","content":"first task"}}`,
		asst("2", "m1", `[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make"}}]`),
		`{"type":"queue-operation","operation":"enqueue","sessionId":"s","content":"new items wer"}`,
		`{"type":"queue-operation","operation":"popAll","sessionId":"s"}`,
		`{"type":"queue-operation","operation":"enqueue","sessionId":"s","content":"new items were added. tackle them"}`,
		`{"type":"queue-operation","operation":"enqueue","sessionId":"s","content":"<task-notification>done</task-notification>"}`,
		`{"type":"user","sessionId":"s","uuid":"3","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}`,
		asst("4", "m2", `[{"type":"text","text":"working on the new items"}]`),
		`{"type":"user","sessionId":"s","uuid":"5","message":{"role":"user","content":"<task-notification>done</task-notification>"}}`,
	)
	tr, err := Import(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range tr.Messages {
		s := string(m.Role)
		if m.Role == history.RoleUser {
			s += ":" + m.Content[0].Text
		}
		got = append(got, s)
	}
	want := []string{"user:first task", "assistant", "tool", "user:new items were added. tackle them", "assistant", "user:<task-notification>done</task-notification>"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("messages:\n got %q\nwant %q", got, want)
	}
	checkInvariants(t, tr)

	// The recorded Claude Code session: each enqueued prompt was dequeued
	// and delivered by its prompt line, so each appears once.
	rec := importFile(t, corpustest.Path(t, "recorded/claude-code/cc2.1.197-two-turns.jsonl"), Options{})
	var users []string
	for _, m := range rec.Messages {
		if m.Role == history.RoleUser {
			users = append(users, m.Content[0].Text)
		}
	}
	if len(users) != 2 || users[1] != "Now do it all again." {
		t.Errorf("recorded session user messages %q", users)
	}
}

// TestImportIsBounded: an endless input (a device like /dev/zero) fails with
// ErrTooLarge after MaxBytes+1 bytes instead of exhausting memory.
func TestImportIsBounded(t *testing.T) {
	endless := io.MultiReader(strings.NewReader(`[{"role":"user","content":"`), &zeros{})
	for _, imp := range []func() error{
		func() error { _, err := Import(endless, Options{MaxBytes: 1 << 16}); return err },
		func() error { _, err := ImportFormat(&zeros{}, FormatPi, Options{MaxBytes: 1 << 16}); return err },
	} {
		if err := imp(); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err = %v, want ErrTooLarge", err)
		}
	}
}

// zeros is an endless reader of 'a' bytes.
type zeros struct{}

func (*zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}
