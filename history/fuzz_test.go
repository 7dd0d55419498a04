package history

import (
	"bytes"
	"encoding/json"
	"testing"
)

// fuzzSeeds are encoded messages from the table cases, plus broken inputs.
func fuzzSeeds(f *testing.F) {
	for _, m := range []Message{
		text(RoleUser, "hi <b>"),
		calls(call("a", "read"), call("b", "bash")),
		result("a", "out"),
		{Role: RoleAssistant, Usage: &Usage{InputTokens: 3}, Content: []Block{{Type: BlockThinking, Text: "t", Signature: "s"}, {Type: BlockRedactedThinking, Data: "d"}}},
		{Role: RoleTool, ToolCallID: "b", IsError: true, Content: []Block{{Type: BlockJSON, JSON: json.RawMessage(`{"k":[1,2]}`)}, {Type: BlockImage, MediaType: "image/png", Artifact: "artifact://x"}}},
	} {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{``, `{}`, `{"role":"user","content":[{"type":"foo"}]}`, `{"Role":"user"}`, `{"role":"tool","tool_call_id":"zz","content":[]}`, "{\"role\":\"\xff\"}", `{"role":"user","content":[[[`} {
		f.Add([]byte(s))
	}
}

// FuzzDecode: Decode never panics, and what it accepts re-encodes to bytes
// that decode to the same encoding (a fixed point).
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			return
		}
		b1, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode of a decoded message: %v", err)
		}
		m2, err := Decode(b1)
		if err != nil {
			t.Fatalf("Decode of an encoding: %v\n%s", err, b1)
		}
		b2, err := Encode(m2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("not stable: %v\n%s\n%s", err, b1, b2)
		}
	})
}

// FuzzCheck: arbitrary bytes decoded as a message (leniently, so that
// invalid UTF-8 and odd shapes reach validation) never make Check, Apply,
// Abandon, Groups or the estimator panic; a message Check accepts encodes.
func FuzzCheck(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if json.Unmarshal(data, &m) != nil {
			return
		}
		s := NewState([]Message{calls(call("a", "read"), call("b", "bash"))})
		err := s.Check(m)
		_ = ValidateBatch(s, []Message{m, m})
		_ = s.Abandon(m)
		if err == nil {
			if _, err := Encode(m); err != nil {
				t.Fatalf("Check accepted a message Encode refuses: %v", err)
			}
		}
		s.Apply(m)
		hist := []Message{calls(call("a", "read")), m, m}
		Groups(hist)
		CloseAbandoned(nil, hist)
		Estimator{ChunkBytes: 64}.Message(m)
	})
}
