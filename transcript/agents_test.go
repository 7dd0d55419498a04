package transcript

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// TestGluedRecords: real pi files sometimes hold two JSON
// records on one line; they import as if each had its own line.
func TestGluedRecords(t *testing.T) {
	data := corpustest.Read(t, "pi/454tools-2compactions.jsonl")
	want, err := Import(bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(data, []byte("\n"))
	// Glue lines 3 and 4, and 10 and 11 (no separator at all).
	glued := bytes.Join([][]byte{
		bytes.Join(lines[:3], []byte("\n")),
		append(append([]byte{}, lines[3]...), lines[4]...),
		bytes.Join(lines[5:10], []byte("\n")),
		append(append([]byte{}, lines[10]...), lines[11]...),
		bytes.Join(lines[12:], []byte("\n")),
	}, []byte("\n"))
	got, err := Import(bytes.NewReader(glued), Options{})
	if err != nil {
		t.Fatalf("glued lines: %v", err)
	}
	if !reflect.DeepEqual(got.Messages, want.Messages) || got.Skipped != 0 {
		t.Errorf("glued lines import differently: %d messages (skipped %d), want %d", len(got.Messages), got.Skipped, len(want.Messages))
	}
}

// TestCutLastLine: a file cut in the middle of its last line imports the
// complete lines and says which line was cut.
func TestCutLastLine(t *testing.T) {
	data := corpustest.Read(t, "pi/454tools-2compactions.jsonl")
	data = bytes.TrimRight(data, "\n")
	cut := data[:len(data)-40]
	tr, err := Import(bytes.NewReader(cut), Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := bytes.Count(cut, []byte("\n")) + 1
	if tr.CutLine != n || tr.Skipped != 1 {
		t.Fatalf("CutLine %d (skipped %d), want line %d", tr.CutLine, tr.Skipped, n)
	}
	if notes := strings.Join(tr.Notes(), "\n"); !strings.Contains(notes, "is cut short") {
		t.Errorf("notes %q do not report the cut line", notes)
	}
}

// miniTraj is a mini-swe-agent 2.x trajectory as the agent writes it: tool
// calls, usage in extra.response.usage, the final submit call without a
// result, then the "exit" message.
const miniTraj = `{
  "info": {"model_stats": {"instance_cost": 0.01, "api_calls": 3}, "mini_version": "2.0.0", "exit_status": "Submitted", "submission": "diff --git a/x b/x"},
  "messages": [
    {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
    {"role": "user", "content": "Please solve this issue: the tests fail."},
    {"role": "assistant", "content": "THOUGHT: look first.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}],
     "extra": {"response": {"model": "gpt-5-mini", "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240, "prompt_tokens_details": {"cached_tokens": 1000}}}}},
    {"role": "tool", "tool_call_id": "call_1", "content": "<returncode>0</returncode>\n<output>setup.py\nsrc\n</output>", "extra": {"returncode": 0}},
    {"role": "assistant", "content": "THOUGHT: done.", "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\"}"}}],
     "extra": {"response": {"model": "gpt-5-mini", "usage": {"prompt_tokens": 1400, "completion_tokens": 30, "total_tokens": 1430}}}},
    {"role": "exit", "content": "diff --git a/x b/x", "extra": {"exit_status": "Submitted", "submission": "diff --git a/x b/x"}}
  ],
  "trajectory_format": "mini-swe-agent-1.1"
}`

func TestMiniSWEAgent(t *testing.T) {
	tr, err := Import(strings.NewReader(miniTraj), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != FormatMiniSWEAgent || tr.Model != "gpt-5-mini" || !strings.HasPrefix(tr.System, "You are a helpful") {
		t.Fatalf("format %q model %q system %q", tr.Format, tr.Model, tr.System)
	}
	roles := []history.Role{}
	for _, m := range tr.Messages {
		roles = append(roles, m.Role)
	}
	// user, assistant(call_1), tool, assistant (text only: the submit call is trailing).
	want := []history.Role{history.RoleUser, history.RoleAssistant, history.RoleTool, history.RoleAssistant}
	if !reflect.DeepEqual(roles, want) {
		t.Fatalf("roles %v, want %v", roles, want)
	}
	if u := tr.Messages[1].Usage; u == nil || u.InputTokens != 200 || u.CacheReadInputTokens != 1000 || u.OutputTokens != 40 {
		t.Errorf("usage of the first response = %+v, want 200 input + 1000 cache read + 40 output", u)
	}
	if len(tr.TrailingCalls) != 1 || tr.TrailingCalls[0].ID != "call_2" || tr.ToolCalls != 1 {
		t.Errorf("trailing calls %+v (tool calls %d), want the submit call", tr.TrailingCalls, tr.ToolCalls)
	}
	if notes := strings.Join(tr.Notes(), "\n"); !strings.Contains(notes, "ends with 1 tool call that got no result (bash") {
		t.Errorf("notes %q", notes)
	}
}

func TestOpenHandsIsRefusedClearly(t *testing.T) {
	events := `[{"id": 0, "timestamp": "2025-01-01T00:00:00", "source": "user", "message": "fix it", "action": "message", "args": {"content": "fix it"}},
 {"id": 1, "timestamp": "2025-01-01T00:00:01", "source": "agent", "message": "Running ls", "action": "run", "args": {"command": "ls"}},
 {"id": 2, "timestamp": "2025-01-01T00:00:02", "source": "agent", "message": "ok", "observation": "run", "content": "a b", "extras": {"exit_code": 0}, "cause": 1}]`
	for name, in := range map[string]string{
		"event array":       events,
		"evaluation output": `{"instance_id": "x__y-1", "history": ` + events + `, "test_result": {}}`,
	} {
		_, err := Import(strings.NewReader(in), Options{})
		if !errors.Is(err, ErrUnsupportedFormat) || !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "OpenHands") {
			t.Errorf("%s: %v, want a clear OpenHands not-supported error", name, err)
		}
	}
}

func TestResponsesRequestBody(t *testing.T) {
	body := `{"model": "gpt-5", "instructions": "Be brief.", "input": [
  {"role": "user", "content": "list files"},
  {"type": "function_call", "call_id": "fc_1", "name": "shell", "arguments": "{\"cmd\":\"ls\"}"},
  {"type": "function_call_output", "call_id": "fc_1", "output": "a.go\nb.go"},
  {"role": "assistant", "content": [{"type": "output_text", "text": "Two files."}]},
  {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]}
]}`
	tr, err := Import(strings.NewReader(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != FormatOpenAIResponses || tr.System != "Be brief." || tr.Model != "gpt-5" || tr.ToolCalls != 1 {
		t.Fatalf("format %q system %q model %q calls %d", tr.Format, tr.System, tr.Model, tr.ToolCalls)
	}
	var roles []history.Role
	for _, m := range tr.Messages {
		roles = append(roles, m.Role)
	}
	if want := []history.Role{history.RoleUser, history.RoleAssistant, history.RoleTool, history.RoleAssistant, history.RoleUser}; !reflect.DeepEqual(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}
	if got := tr.Messages[2]; got.ToolCallID != "fc_1" || got.ToolName != "shell" || got.Content[0].Text != "a.go\nb.go" {
		t.Errorf("tool result %+v", got)
	}
}

// TestTrailingCallOnlyAtTheEnd: calls left open in the middle stay (the
// abandoned-round rule); only the ones the file ends with are dropped.
func TestTrailingCallOnlyAtTheEnd(t *testing.T) {
	chat := `[{"role":"user","content":"go"},
 {"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"bash","arguments":"{}"}}]},
 {"role":"user","content":"never mind"},
 {"role":"assistant","content":"ok","tool_calls":[{"id":"b","type":"function","function":{"name":"submit","arguments":"{}"}}]}]`
	tr, err := Import(strings.NewReader(chat), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.TrailingCalls) != 1 || tr.TrailingCalls[0].Name != "submit" {
		t.Fatalf("trailing %+v", tr.TrailingCalls)
	}
	if a := history.Groups(tr.Messages); len(a.Unanswered) != 1 {
		t.Errorf("unanswered in the middle: %d, want 1 (call a)", len(a.Unanswered))
	}
	last := tr.Messages[len(tr.Messages)-1]
	if last.Role != history.RoleAssistant || len(last.Content) != 1 || last.Content[0].Text != "ok" {
		t.Errorf("last message %+v, want the text without the call", last)
	}
}
