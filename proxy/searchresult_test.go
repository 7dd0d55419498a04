package proxy

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// TestSearchResultsAreToolText: a retrieval tool's search_result blocks
// (in a tool_result's content) are its output as text to ctxd
// (wire/anthropic): a large one is offloaded like any large tool result,
// the stub naming its artifact, and the stored result counts its text; a
// small one in the message ctxd rewrote arrives byte for byte. The
// upstream (the strict fake provider) accepts every request (checked at
// the fixture's cleanup).
func TestSearchResultsAreToolText(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("what do the docs say about the linker?")
	calls := [][3]string{{"toolu_1", "search", `{"q":"linker"}`}, {"toolu_2", "search", `{"q":"ld flags"}`}}
	f.up.script(reply{stream: true, body: sse("", "", calls, 100, 5)})
	r1, _ := f.post(c.body(), nil)
	c.assistant(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"search","input":{"q":"linker"}},{"type":"tool_use","id":"toolu_2","name":"search","input":{"q":"ld flags"}}]}`)
	big := strings.Repeat("the linker resolves symbols in order\n", 1500)
	large := `{"type":"search_result","source":"https://docs.example.com/linker","title":"Linker guide","content":[{"type":"text","text":` + jsonString(big) + `}],"citations":{"enabled":true}}`
	small := `{"type":"search_result","source":"kb://ld-flags","title":"ld flags","content":[{"type":"text","text":"-Wl,--as-needed drops unused libraries"}],"citations":{"enabled":true}}`
	c.msgs = append(c.msgs, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[`+large+`]},{"type":"tool_result","tool_use_id":"toolu_2","content":[`+small+`]}]}`)
	f.up.script(textAnswer("The linker resolves symbols in order."))
	r2, _ := f.post(c.body(), nil)
	for i, r := range []*httpResp{{r1.StatusCode, r1.Header.Get(HeaderDiagnostic)}, {r2.StatusCode, r2.Header.Get(HeaderDiagnostic)}} {
		if r.status != 200 || r.diagnostic != "" {
			t.Errorf("request %d: %d, diagnostic %q", i+1, r.status, r.diagnostic)
		}
	}
	f.settle()
	reqs := f.up.requests()
	out := reqs[len(reqs)-1].body
	if bytes.Contains(out, []byte(big[:4000])) || !bytes.Contains(out, []byte("artifact://")) {
		t.Fatalf("the large search result was not offloaded (%d bytes sent)", len(out))
	}
	if !bytes.Contains(out, []byte(`"tool_use_id":"toolu_2","content":[`+small+`]`)) {
		t.Errorf("the small search result did not arrive byte for byte: want %s in\n%s", small, lastBytes(out, 900))
	}

	id := r2.Header.Get(HeaderSessionID)
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	var est history.Estimator
	results := 0
	for _, m := range a.Messages {
		if m.Role != history.RoleTool {
			continue
		}
		results++
		switch m.ToolCallID {
		case "toolu_1":
			if len(m.Content) != 1 || !strings.Contains(m.Content[0].Text, "artifact://") || !strings.Contains(m.Content[0].Text, "Linker guide") {
				t.Errorf("the offloaded result is stored as %+v", m.Content)
			}
		case "toolu_2":
			if len(m.Content) != 1 || m.Content[0].Type != history.BlockText || m.Content[0].Text != "ld flags\nkb://ld-flags\n\n-Wl,--as-needed drops unused libraries" {
				t.Errorf("the small result is stored as %+v", m.Content)
			}
			without := m
			without.Content = nil
			if d := est.Message(m) - est.Message(without); d < history.BlockOverheadTokens+est.Text(m.Content[0].Text) {
				t.Errorf("the estimate counts the small result's block as %d tokens", d)
			}
		}
	}
	if results != 2 {
		t.Errorf("%d tool results stored, want 2", results)
	}
}
