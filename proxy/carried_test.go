package proxy

import (
	"bytes"
	"strings"
	"testing"
)

// TestRewriteCarriesOtherBlocks: when ctxd offloads a tool result, the
// client's other blocks of that message arrive at the upstream byte for
// byte (docs/proxy.md "Blocks are carried"), whatever their type.
func TestRewriteCarriesOtherBlocks(t *testing.T) {
	// A base64 image in another key order than ctxd's and a text block
	// with citations, which ctxd models, are carried as the client's
	// bytes too (history.Block.Raw), in the one message the client sent
	// (history.Message.Joined). A tool_result the rewrite does not target
	// is the client's block (cache_reference kept).
	rows := []struct{ name, block string }{
		{"tool_reference", `{"type":"tool_reference","tool_name":"Read"}`},
		{"cache_edits", `{"type":"cache_edits","edits":[{"type":"delete","cache_reference":"toolu_0"}]}`},
		{"image", `{"type":"image","source":{"data":"iVBORw0KGgo=","media_type":"image/png","type":"base64"}}`},
		{"image_url", `{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`},
		{"document", `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"notes"},"title":"n","citations":{"enabled":true}}`},
		{"search_result", `{"type":"search_result","source":"https://example.com","title":"t","content":[{"type":"text","text":"hit"}],"citations":{"enabled":true}}`},
		{"text_with_citations", `{"type":"text","text":"see","citations":[{"type":"char_location","cited_text":"x","document_index":0,"start_char_index":0,"end_char_index":1}]}`},
		{"tool_result_with_cache_reference", `{"type":"tool_result","tool_use_id":"toolu_2","content":"small","cache_reference":"toolu_2"}`},
		{"unknown_future", `{"type":"hologram_2031","payload":{"k":[1,2,{"z":null}]},"note":"\u003cb\u003e"}`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			f := newFixture(t, testConfig())
			c := newConversation().user("read the log")
			calls := [][3]string{{"toolu_1", "Bash", `{"command":"cat big.log"}`}}
			call := `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"cat big.log"}}]}`
			if strings.Contains(row.block, "toolu_2") {
				calls = append(calls, [3]string{"toolu_2", "Read", `{"path":"a"}`})
				call = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"cat big.log"}},{"type":"tool_use","id":"toolu_2","name":"Read","input":{"path":"a"}}]}`
			}
			f.up.script(reply{stream: true, body: sse("", "", calls, 100, 5)})
			f.post(c.body(), nil)
			big := strings.Repeat("log line with some words\n", 2000)
			res := jsonString(big)
			c.assistant(call)
			c.msgs = append(c.msgs, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":`+res+`},`+row.block+`]}`)
			resp, _ := f.post(c.body(), nil)
			if d := resp.Header.Get(HeaderDiagnostic); d != "" {
				t.Errorf("diagnostic: %s", d)
			}
			reqs := f.up.requests()
			out := reqs[len(reqs)-1].body
			if bytes.Contains(out, []byte(big[:4000])) || !bytes.Contains(out, []byte("artifact://")) {
				t.Fatalf("the tool result was not offloaded (%d bytes sent)", len(out))
			}
			msgs := outgoingMessages(t, out)
			if len(msgs) != len(c.msgs) {
				t.Errorf("the upstream got %d messages for the client's %d", len(msgs), len(c.msgs))
			}
			// The block the client sent last carries the moving marker.
			want := row.block[:len(row.block)-1] + `,"cache_control":{"type":"ephemeral"}}`
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("the %s block did not arrive byte for byte: want %s in\n%s", row.name, want, lastBytes(out, 700))
			}
		})
	}
}

// TestOffloadKeepsResultFields: a tool_result ctxd offloads keeps the
// fields the canonical model lacks (cache_reference), the stub in place of
// its content.
func TestOffloadKeepsResultFields(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("read the log")
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"cat big.log"}`}}, 100, 5)})
	f.post(c.body(), nil)
	big := strings.Repeat("log line with some words\n", 2000)
	c.assistant(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"cat big.log"}}]}`)
	c.msgs = append(c.msgs, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":`+jsonString(big)+`,"cache_reference":"toolu_1"}]}`)
	f.post(c.body(), nil)
	reqs := f.up.requests()
	out := reqs[len(reqs)-1].body
	if bytes.Contains(out, []byte(big[:4000])) || !bytes.Contains(out, []byte("artifact://")) {
		t.Fatalf("the tool result was not offloaded (%d bytes sent)", len(out))
	}
	want := `{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":`
	if !bytes.Contains(out, []byte(want)) || !bytes.Contains(out, []byte(`"cache_reference":"toolu_1","cache_control":{"type":"ephemeral"}}]}`)) {
		t.Errorf("the offloaded tool_result lost its cache_reference or form:\n%s", lastBytes(out, 400))
	}
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
