package contextedit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// writeTurn appends an assistant message calling write with a content of n
// characters, then its short result.
func (h *hb) writeTurn(id string, n int) *hb {
	in, _ := json.Marshal(map[string]any{"file_path": "/src/big.go", "content": strings.Repeat("é", n/2) + strings.Repeat("x", n-n/2), "mode": 420})
	// Keys in a fixed, non-alphabetical order, as an agent writes them.
	in = []byte(`{"file_path":"/src/big.go","content":` + string(mustField(in, "content")) + `,"mode":420}`)
	h.add(history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: "write", Input: in}}})
	h.add(history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "write", Content: []history.Block{{Type: history.BlockText, Text: "File written."}}})
	return h
}

func mustField(in []byte, k string) json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(in, &m)
	return m[k]
}

// A 40 KB write input in an old turn is cleared by a pass: the input stays
// an object of the same keys in the same order, the long string becomes a
// one-line stub, the other fields keep their bytes; the pass records the
// call and field, so a ledger rebuilt from it renders the same bytes; with
// clear_tool_inputs = false nothing fires (docs/design.md §6).
func TestPassClearsLongToolInputs(t *testing.T) {
	cfg := config.Defaults().ContextEditing
	cfg.MaxTotalToolResultChars = 30000
	cfg.MinCharsPerPass = 20000
	h := (&hb{}).user("write the file").writeTurn("w1", 40000)
	for range 3 {
		h.turn(false, res{"bash", 10})
	}
	p := Plan(cfg, h.msgs, nil, false)
	if p == nil || len(p.Inputs) != 1 || p.Inputs[0].ID != "w1" || len(p.Inputs[0].Fields) != 1 || p.Inputs[0].Fields[0] != "/content" {
		t.Fatalf("pass = %+v, want the write's content cleared", p)
	}
	if p.ElidedCount != 0 || p.CharsSaved < 39000 {
		t.Fatalf("pass elided %d results and saved %d characters", p.ElidedCount, p.CharsSaved)
	}
	var l Ledger
	l.Apply(*p)
	out := l.Render(h.msgs[1], "")
	in := out.Content[0].Input
	if len(in) > 300 {
		t.Fatalf("rendered input is %d bytes", len(in))
	}
	want := `{"file_path":"/src/big.go","content":"` + InputStub(40000) + `","mode":420}`
	if string(in) != want {
		t.Fatalf("rendered input %s, want %s", in, want)
	}
	if strings.Contains(InputStub(40000), "\n") {
		t.Fatal("the stub is not one line")
	}
	// The stored message is untouched; a ledger rebuilt from the recorded
	// pass (through JSON, as a resume does) renders the same bytes.
	if len(h.msgs[1].Content[0].Input) < 40000 {
		t.Fatal("Render changed the stored message")
	}
	data, _ := json.Marshal(p)
	var back Pass
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	var l2 Ledger
	l2.Apply(back)
	a, _ := history.Encode(out)
	b, _ := history.Encode(l2.Render(h.msgs[1], ""))
	if string(a) != string(b) {
		t.Fatal("a rebuilt ledger renders other bytes")
	}
	// A second plan finds nothing more to clear.
	if p2 := Plan(cfg, h.msgs, &l, false); p2 != nil {
		t.Fatalf("second pass %+v", p2)
	}
	off := cfg
	off.ClearToolInputs = false
	if p := Plan(off, h.msgs, nil, false); p != nil {
		t.Fatalf("clear_tool_inputs = false fired %+v", p)
	}
	// A recent write and a protected tool keep their input.
	recent := (&hb{}).user("write").turn(false, res{"bash", 10}).writeTurn("w2", 40000)
	if p := Plan(cfg, recent.msgs, nil, false); p != nil {
		t.Fatalf("recent write cleared: %+v", p)
	}
	prot := cfg
	prot.ProtectToolNames = []string{"Write"}
	if p := Plan(prot, h.msgs, nil, false); p != nil {
		t.Fatalf("protected write cleared: %+v", p)
	}
}

// Long strings nested in objects and arrays (a multi-edit's old and new
// text, a shell command array's heredoc) are cleared by their JSON Pointer;
// short ones, numbers and keys keep their bytes.
func TestClearInputNested(t *testing.T) {
	long := strings.Repeat("ab/~", 500)
	in := json.RawMessage(`{"file_path":"/a.go","edits":[{"old_string":"` + long + `","new_string":"short"},{"old_string":"x","new_string":"` + long + `"}],"command":["bash","-lc","` + long + `"],"n":3,"a/b~":"` + long + `"}`)
	paths, chars := InputStrings(in)
	var big []string
	for i, p := range paths {
		if chars[i] >= 1000 {
			big = append(big, p)
		}
	}
	want := []string{"/edits/0/old_string", "/edits/1/new_string", "/command/2", "/a~1b~0"}
	if strings.Join(big, " ") != strings.Join(want, " ") {
		t.Fatalf("long strings at %q, want %q", big, want)
	}
	got := string(clearInput(in, big))
	stub := InputStub(2000)
	wantOut := `{"file_path":"/a.go","edits":[{"old_string":"` + stub + `","new_string":"short"},{"old_string":"x","new_string":"` + stub + `"}],"command":["bash","-lc","` + stub + `"],"n":3,"a/b~":"` + stub + `"}`
	if got != wantOut {
		t.Fatalf("cleared input\n%s\nwant\n%s", got, wantOut)
	}
	if string(clearInput(json.RawMessage(`not json`), want)) != "not json" {
		t.Fatal("invalid input changed")
	}
}
