package anthropic

import (
	"encoding/json"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// TestCarryRendersBlocksAsSent: with Options.Carry a json block that is a
// content block is rendered as that block byte for byte (its cache marker
// left to the marker placement), anything else as text; without Carry
// every json block is text (json blocks from other providers).
func TestCarryRendersBlocksAsSent(t *testing.T) {
	cases := []struct{ in, carried string }{
		{`{"type":"tool_reference","tool_name":"Read"}`, `{"type":"tool_reference","tool_name":"Read"}`},
		{`{"cache_control":{"type":"ephemeral"},"type":"x_future","a":1}`, `{"type":"x_future","a":1}`},
		{`{"type":"x_future","cache_control":{"type":"ephemeral"},"a":[1,2]}`, `{"type":"x_future","a":[1,2]}`},
		{`{"type":"x_future","a":"\u003c","cache_control":{"type":"ephemeral","ttl":"1h"}}`, `{"type":"x_future","a":"\u003c"}`},
		{`{"responses_item":{"type":"x"}}`, ""},
		{`{"type":7}`, ""},
		{`[1,2]`, ""},
	}
	for _, c := range cases {
		msg := history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockJSON, JSON: json.RawMessage(c.in)}}}
		got, _ := json.Marshal(RenderWith("", nil, []history.Message{msg}, Options{Carry: true}).Messages[0].Content[0])
		want := c.carried
		if want == "" {
			w, _ := json.Marshal(Block{Type: "text", Text: c.in})
			want = string(w)
		}
		if string(got) != want {
			t.Errorf("carry %s: got %s, want %s", c.in, got, want)
		}
		plain, _ := json.Marshal(Render("", nil, []history.Message{msg}).Messages[0].Content[0])
		if w, _ := json.Marshal(Block{Type: "text", Text: c.in}); string(plain) != string(w) {
			t.Errorf("without carry %s became %s", c.in, plain)
		}
	}
	b := Block{Type: "x_future", Raw: json.RawMessage(`{"type":"x_future","a":1}`), CacheControl: Ephemeral}
	if got, _ := json.Marshal(b); string(got) != `{"type":"x_future","a":1,"cache_control":{"type":"ephemeral"}}` {
		t.Errorf("marker on a carried block: %s", got)
	}
}

// TestSearchResultSourceParses: a block whose "source" is a string (a
// search_result's) is read, kept whole, not refused.
func TestSearchResultSourceParses(t *testing.T) {
	raw := `{"role":"user","content":[{"type":"search_result","source":"https://example.com","title":"t","content":[{"type":"text","text":"hit"}]}]}`
	ms, err := ParseMessage(json.RawMessage(raw), nil)
	if err != nil || len(ms) != 1 || ms[0].Content[0].Type != history.BlockJSON {
		t.Fatalf("ParseMessage: %v %+v", err, ms)
	}
}
