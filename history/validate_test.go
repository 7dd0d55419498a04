package history

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func text(role Role, s string) Message {
	return Message{Role: role, Content: []Block{{Type: BlockText, Text: s}}}
}

func call(id, name string) Block {
	return Block{Type: BlockToolCall, ID: id, Name: name, Input: json.RawMessage(`{"x":1}`)}
}

func calls(bs ...Block) Message {
	return Message{Role: RoleAssistant, Content: bs}
}

func result(id, s string) Message {
	m := text(RoleTool, s)
	m.ToolCallID = id
	return m
}

func TestCheck(t *testing.T) {
	usage := &Usage{InputTokens: 1}
	tests := []struct {
		name    string
		history []Message
		m       Message
		field   string // "" means valid
		msg     string // substring of the error message
	}{
		{"user text", nil, text(RoleUser, "hi"), "", ""},
		{"assistant with usage and model", nil, Message{Role: RoleAssistant, Usage: usage, Model: "m", Content: []Block{{Type: BlockText, Text: "ok"}}}, "", ""},
		{"assistant call", nil, calls(call("a", "read")), "", ""},
		{"tool answers open call", []Message{calls(call("a", "read"))}, result("a", "out"), "", ""},
		{"tool with matching name", []Message{calls(call("a", "read"))}, func() Message { m := result("a", "x"); m.ToolName = "read"; return m }(), "", ""},
		{"tool json and image", []Message{calls(call("a", "read"))}, Message{Role: RoleTool, ToolCallID: "a", IsError: true, Content: []Block{{Type: BlockJSON, JSON: json.RawMessage(`[1]`)}, {Type: BlockImage, MediaType: "image/png", Artifact: "artifact://x"}}}, "", ""},
		{"thinking and redacted", nil, Message{Role: RoleAssistant, Content: []Block{{Type: BlockThinking, Text: "t", Signature: "s"}, {Type: BlockRedactedThinking, Data: "d"}}}, "", ""},
		{"user image data", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png", Data: "AAAA"}}}, "", ""},
		{"empty content", nil, Message{Role: RoleAssistant}, "", ""},

		{"empty role", nil, Message{Content: []Block{{Type: BlockText, Text: "x"}}}, "role", "empty role"},
		{"unknown role", nil, text("developer", "x"), "role", `unknown role "developer"`},
		{"invalid utf8 text", nil, text(RoleUser, "a\xffb"), "content[0].text", "invalid UTF-8"},
		{"invalid utf8 role", nil, Message{Role: "us\xff"}, "role", "invalid UTF-8"},
		{"invalid utf8 tool_call_id", []Message{calls(call("a", "read"))}, result("a\xff", "x"), "tool_call_id", "invalid UTF-8"},
		{"invalid utf8 tool_name", nil, Message{Role: RoleTool, ToolName: "\xc3"}, "tool_name", "invalid UTF-8"},
		{"invalid utf8 model", nil, Message{Role: RoleAssistant, Model: "\xc3"}, "model", "invalid UTF-8"},
		{"invalid utf8 signature", nil, Message{Role: RoleAssistant, Content: []Block{{Type: BlockThinking, Signature: "\xff"}}}, "content[0].signature", "invalid UTF-8"},
		{"invalid utf8 data", nil, Message{Role: RoleAssistant, Content: []Block{{Type: BlockRedactedThinking, Data: "\xff"}}}, "content[0].data", "invalid UTF-8"},
		{"invalid utf8 id", nil, calls(Block{Type: BlockToolCall, ID: "\xff", Name: "n", Input: json.RawMessage(`{}`)}), "content[0].id", "invalid UTF-8"},
		{"invalid utf8 name", nil, calls(Block{Type: BlockToolCall, ID: "a", Name: "\xff", Input: json.RawMessage(`{}`)}), "content[0].name", "invalid UTF-8"},
		{"invalid utf8 input", nil, calls(Block{Type: BlockToolCall, ID: "a", Name: "n", Input: json.RawMessage("\"\xff\"")}), "content[0].input", "invalid UTF-8"},
		{"invalid utf8 media_type", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "\xff", Data: "A"}}}, "content[0].media_type", "invalid UTF-8"},
		{"invalid utf8 artifact", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png", Artifact: "\xff"}}}, "content[0].artifact", "invalid UTF-8"},
		{"invalid utf8 json", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockJSON, JSON: json.RawMessage("\"\xff\"")}}}, "content[0].json", "invalid UTF-8"},
		{"invalid utf8 block type", nil, Message{Role: RoleUser, Content: []Block{{Type: "\xff"}}}, "content[0].type", "invalid UTF-8"},
		{"unknown block type", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "x"}, {Type: "foo"}}}, "content[1].type", `unknown block type "foo"`},
		{"empty block type", nil, Message{Role: RoleUser, Content: []Block{{Text: "x"}}}, "content[0].type", `unknown block type ""`},
		{"foreign field on text", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "x", ID: "a"}}}, "content[0].id", "not a field of a text block"},
		{"foreign field on tool_call", nil, calls(Block{Type: BlockToolCall, ID: "a", Name: "n", Input: json.RawMessage(`{}`), Text: "x"}), "content[0].text", "not a field of a tool_call block"},
		{"tool_call in user", nil, Message{Role: RoleUser, Content: []Block{call("a", "n")}}, "content[0].type", "tool_call blocks only in assistant"},
		{"tool_call without id", nil, calls(Block{Type: BlockToolCall, Name: "n", Input: json.RawMessage(`{}`)}), "content[0].id", "required"},
		{"tool_call without name", nil, calls(Block{Type: BlockToolCall, ID: "a", Input: json.RawMessage(`{}`)}), "content[0].name", "required"},
		{"tool_call without input", nil, calls(Block{Type: BlockToolCall, ID: "a", Name: "n"}), "content[0].input", "required"},
		{"tool_call invalid input", nil, calls(Block{Type: BlockToolCall, ID: "a", Name: "n", Input: json.RawMessage(`{"x":`)}), "content[0].input", "invalid JSON"},
		{"duplicate call id in message", nil, calls(call("a", "n"), call("a", "n")), "content[1].id", `duplicate tool call id "a"`},
		{"duplicate call id in history", []Message{calls(call("a", "n")), result("a", "x")}, calls(call("b", "n"), call("a", "n")), "content[1].id", `duplicate tool call id "a"`},
		{"thinking in user", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockThinking, Text: "t"}}}, "content[0].type", "thinking blocks only in assistant"},
		{"redacted thinking in tool", []Message{calls(call("a", "n"))}, Message{Role: RoleTool, ToolCallID: "a", Content: []Block{{Type: BlockRedactedThinking, Data: "d"}}}, "content[0].type", "redacted_thinking blocks only in assistant"},
		{"redacted thinking without data", nil, Message{Role: RoleAssistant, Content: []Block{{Type: BlockRedactedThinking}}}, "content[0].data", "required"},
		{"image without media type", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, Data: "A"}}}, "content[0].media_type", "required"},
		{"image of a type providers refuse", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "text/html", Data: "AAAA"}}}, "content[0].media_type", `"text/html" is not an image type the providers accept`},
		{"image of SVG", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/svg+xml", Artifact: "artifact://x"}}}, "content[0].media_type", "image/jpeg, image/png, image/gif, image/webp"},
		{"image without data", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png"}}}, "content[0].data", "needs data or an artifact"},
		{"image with both", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png", Data: "A", Artifact: "artifact://x"}}}, "content[0].artifact", "not both"},
		{"image bad artifact", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png", Artifact: "file:///x"}}}, "content[0].artifact", "not an artifact:// reference"},
		{"json block empty", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockJSON}}}, "content[0].json", "required"},
		{"json block invalid", nil, Message{Role: RoleUser, Content: []Block{{Type: BlockJSON, JSON: json.RawMessage(`{a}`)}}}, "content[0].json", "invalid JSON"},
		{"tool_call_id on user", nil, Message{Role: RoleUser, ToolCallID: "a"}, "tool_call_id", "only on a tool message"},
		{"tool_name on assistant", nil, Message{Role: RoleAssistant, ToolName: "a"}, "tool_name", "only on a tool message"},
		{"is_error on user", nil, Message{Role: RoleUser, IsError: true}, "is_error", "only on a tool message"},
		{"usage on user", nil, Message{Role: RoleUser, Usage: usage}, "usage", "only on an assistant message"},
		{"usage on tool", []Message{calls(call("a", "n"))}, func() Message { m := result("a", "x"); m.Usage = usage; return m }(), "usage", "only on an assistant message"},
		{"model on user", nil, Message{Role: RoleUser, Model: "m"}, "model", "only on an assistant message"},
		{"tool without call id", nil, text(RoleTool, "x"), "tool_call_id", "required on a tool message"},
		{"tool answering unknown call", nil, result("zz", "x"), "tool_call_id", `no tool call "zz"`},
		{"tool answering answered call", []Message{calls(call("a", "n")), result("a", "x")}, result("a", "y"), "tool_call_id", "already answered or abandoned"},
		{"tool answering abandoned call", []Message{calls(call("a", "n")), text(RoleUser, "interrupt")}, result("a", "late"), "tool_call_id", "not open"},
		{"tool name mismatch", []Message{calls(call("a", "read"))}, func() Message { m := result("a", "x"); m.ToolName = "write"; return m }(), "tool_name", `"write" does not match the call's tool "read"`},
		{"tool call block in tool message", []Message{calls(call("a", "n"))}, Message{Role: RoleTool, ToolCallID: "a", Content: []Block{call("b", "n")}}, "content[0].type", "only in assistant"},
		{"assistant while a call is open", []Message{calls(call("c1", "read"), call("c2", "grep")), result("c1", "x")}, text(RoleAssistant, "hm"), "role", `tool call "c2" (grep) is open`},
		{"user while calls open", []Message{calls(call("a", "n"), call("b", "n")), result("a", "x")}, text(RoleUser, "next"), "role", `1 tool call(s) are open (first "b")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState(tt.history)
			before := s.Open()
			err := s.Check(tt.m)
			if !reflect.DeepEqual(before, s.Open()) {
				t.Fatalf("Check changed the state: %v → %v", before, s.Open())
			}
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Check = %v, want a *ValidationError", err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(err, ErrInvalid) = false")
			}
			if ve.Index != -1 || ve.Field != tt.field || !strings.Contains(ve.Message, tt.msg) {
				t.Errorf("Check = {%d %q %q}, want {-1 %q ⊇%q}", ve.Index, ve.Field, ve.Message, tt.field, tt.msg)
			}
			if got, want := err.Error(), tt.field+": "+ve.Message; got != want {
				t.Errorf("Error() = %q, want %q", got, want)
			}
		})
	}
}

func TestValidateBatch(t *testing.T) {
	base := NewState([]Message{text(RoleUser, "go"), calls(call("a", "read"))})
	tests := []struct {
		name string
		msgs []Message
		want string // "" means valid
	}{
		{"answers then continues", []Message{result("a", "x"), calls(call("b", "n")), result("b", "y"), text(RoleUser, "ok")}, ""},
		{"index and field in error", []Message{result("a", "x"), text(RoleUser, "ok"), {Role: RoleUser, Content: []Block{{Type: BlockText, Text: "x"}, {Type: "foo"}}}}, `message 2: content[1].type: unknown block type "foo"`},
		{"duplicate within batch", []Message{result("a", "x"), calls(call("b", "n")), result("b", "y"), calls(call("b", "n"))}, `message 3: content[0].id: duplicate tool call id "b"`},
		{"duplicate of history", []Message{result("a", "x"), calls(call("a", "n"))}, `message 1: content[0].id: duplicate tool call id "a"`},
		{"answer twice within batch", []Message{result("a", "x"), result("a", "y")}, `message 1: tool_call_id: tool call "a" is not open`},
		{"user while open", []Message{text(RoleUser, "x")}, `message 0: role: a user message while 1 tool call(s) are open`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateBatch(base, tt.msgs)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ValidateBatch = %v, want %q", err, tt.want)
			}
			// The base state is untouched.
			if got := base.Open(); len(got) != 1 || got[0].ID != "a" || base.Len() != 2 || base.used("b") {
				t.Fatalf("ValidateBatch changed the state: %+v", got)
			}
		})
	}
}

func TestAbandon(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := NewState([]Message{text(RoleUser, "go"), calls(call("a", "read"), call("b", "bash"), call("c", "grep")), result("b", "x")})
	next := text(RoleUser, "stop, do this instead")
	next.Time = at
	if got := s.Abandon(result("a", "x")); got != nil {
		t.Errorf("Abandon(tool message) = %v, want nil", got)
	}
	if got := NewState(nil).Abandon(next); got != nil {
		t.Errorf("Abandon with no open call = %v, want nil", got)
	}
	got := s.Abandon(next)
	want := []Message{
		{Role: RoleTool, ToolCallID: "a", ToolName: "read", IsError: true, Time: at, Content: []Block{{Type: BlockText, Text: "tool call abandoned: no result was recorded"}}},
		{Role: RoleTool, ToolCallID: "c", ToolName: "grep", IsError: true, Time: at, Content: []Block{{Type: BlockText, Text: "tool call abandoned: no result was recorded"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Abandon = %+v\nwant %+v", got, want)
	}
	if len(s.Open()) != 2 {
		t.Fatal("Abandon changed the state")
	}
	// The results and then the prompt validate and close the round.
	if err := ValidateBatch(s, append(got, next)); err != nil {
		t.Fatal(err)
	}
	for _, m := range append(got, next) {
		s.Apply(m)
	}
	if len(s.Open()) != 0 {
		t.Fatalf("open after abandon: %v", s.Open())
	}
}

func TestCloseAbandoned(t *testing.T) {
	msgs := []Message{
		text(RoleUser, "go"),
		calls(call("a", "read"), call("b", "bash")),
		result("a", "x"),
		text(RoleUser, "interrupt"), // b abandoned
		calls(call("c", "read")),
		result("c", "y"),
		text(RoleUser, "fine"),
		calls(call("d", "read")), // still open at the end
	}
	out, closed := CloseAbandoned(nil, msgs)
	if len(out) != len(msgs)+1 {
		t.Fatalf("len = %d, want %d", len(out), len(msgs)+1)
	}
	if out[3].ToolCallID != "b" || out[3].ToolName != "bash" || !out[3].IsError || out[4].Content[0].Text != "interrupt" {
		t.Fatalf("inserted %+v before %+v", out[3], out[4])
	}
	if want := []Call{{ID: "b", Name: "bash", Index: 1}}; !reflect.DeepEqual(closed, want) {
		t.Fatalf("closed = %+v, want %+v", closed, want)
	}
	if err := ValidateBatch(&State{}, out); err != nil {
		t.Fatal(err)
	}
	a := Groups(out)
	if len(a.Abandoned) != 0 || len(a.Orphans) != 0 || len(a.Open) != 1 || a.Open[0].ID != "d" {
		t.Fatalf("Groups after CloseAbandoned: %+v", a)
	}
	// Nothing to close: the same slice back.
	same, closed := CloseAbandoned(nil, msgs[:3])
	if &same[0] != &msgs[0] || closed != nil {
		t.Fatal("CloseAbandoned copied a history with nothing to close")
	}
	// A state with an open call before msgs.
	s := NewState(msgs[:2])
	out, closed = CloseAbandoned(s, []Message{text(RoleUser, "x")})
	if len(out) != 3 || len(closed) != 2 || closed[1].ID != "b" || len(s.Open()) != 2 {
		t.Fatalf("CloseAbandoned(state) = %+v, %+v", out, closed)
	}
}

func TestValidateBatchNilState(t *testing.T) {
	msgs := []Message{{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "hi"}}}}
	if err := ValidateBatch(nil, msgs); err != nil {
		t.Fatal(err)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	s := NewState([]Message{{Role: RoleAssistant, Content: []Block{{Type: BlockToolCall, ID: "a", Name: "read", Input: []byte(`{}`)}}}})
	c := s.Clone()
	c.Apply(Message{Role: RoleTool, ToolCallID: "a", Content: []Block{{Type: BlockText, Text: "ok"}}})
	if len(s.Open()) != 1 || len(c.Open()) != 0 {
		t.Fatalf("open: original %v clone %v", s.Open(), c.Open())
	}
	// A call id used in the original stays used in the clone.
	dup := Message{Role: RoleAssistant, Content: []Block{{Type: BlockToolCall, ID: "a", Name: "read", Input: []byte(`{}`)}}}
	if err := c.Check(dup); err == nil {
		t.Fatal("clone forgot a used call id")
	}
}

func TestProviderShapedContent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		m     Message
		field string
	}{
		{"tool input a string", Message{Role: RoleAssistant, Content: []Block{{Type: BlockToolCall, ID: "a", Name: "x", Input: []byte(`"notjson"`)}}}, "content[0].input"},
		{"tool input an array", Message{Role: RoleAssistant, Content: []Block{{Type: BlockToolCall, ID: "a", Name: "x", Input: []byte(`[1]`)}}}, "content[0].input"},
		{"image not base64", Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png", Data: "!!!notbase64"}}}, "content[0].data"},
		{"empty user message", Message{Role: RoleUser, Content: []Block{}}, "content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := (&State{}).Check(tc.m)
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("err = %v, want field %q", err, tc.field)
			}
		})
	}
	if err := (&State{}).Check(Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}}}); err != nil {
		t.Fatalf("valid image refused: %v", err)
	}
}

func TestObjectInput(t *testing.T) {
	for in, want := range map[string]string{`{"a":1}`: `{"a":1}`, `"s"`: `{"input":"s"}`, `[1]`: `{"input":[1]}`, ``: `{}`, `nope`: `{}`} {
		if got := string(ObjectInput([]byte(in))); got != want {
			t.Errorf("ObjectInput(%s) = %s, want %s", in, got, want)
		}
	}
}
