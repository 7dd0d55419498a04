package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
)

// The wire-conformance suite (docs/proxy.md "Conformance"): one row per
// artifact of the providers' documented shapes. Each row puts the artifact
// in a conversation, has ctxd rewrite that conversation (an offloaded tool
// result), then sends the next request; it asserts the bytes forwarded
// (the artifact byte for byte in every request), what is stored, and
// whether the estimate counts it.

// conformRow is one artifact in a conversation.
type conformRow struct {
	name string
	// artifact is the documented shape, compact JSON, as the client sends it.
	artifact string
	// where puts the artifact: "message" (a whole message or item of the
	// history), "block" (a block beside the client's first text),
	// "results" (a block beside the tool result ctxd offloads), "top" (a
	// member of the request body).
	where string
	// stored is what the stored history holds of it: "" nothing (the
	// artifact's bytes must not be in the stored history), else a
	// fragment of the stored message's encoding.
	stored string
	// counted: the estimate counts the stored artifact (more than a
	// block's overhead).
	counted bool
	// follow is an item sent right after a "message" artifact.
	follow string
}

// big is a tool output ctxd offloads.
var conformBig = strings.Repeat("log line with some words\n", 2000)

// messagesRows are the Anthropic Messages API's artifacts.
var messagesRows = []conformRow{
	{name: "compaction_block", where: "message", stored: `"type":"compaction"`, counted: true,
		artifact: `{"role":"assistant","content":[{"type":"compaction","content":"Summary: the user asked to fix the build; steps 1-4 ran."},{"type":"text","text":"Continuing."}]}`},
	{name: "mid_conversation_system", where: "message", stored: `"role":"system"`, counted: true,
		artifact: `{"role":"system","content":[{"type":"text","text":"The user switched to plan mode."}]}`},
	// Mid-conversation tool changes: a system message's tool_addition and
	// tool_removal blocks (a tool named by reference).
	{name: "tool_addition", where: "message", stored: `tool_addition`, counted: true,
		artifact: `{"role":"system","content":[{"type":"tool_addition","tool":{"type":"tool_reference","name":"WebFetch"}}]}`},
	{name: "tool_removal", where: "message", stored: `tool_removal`, counted: true,
		artifact: `{"role":"system","content":[{"type":"text","text":"WebFetch is no longer available."},{"type":"tool_removal","tool":{"type":"tool_reference","name":"WebFetch"}}]}`},
	{name: "server_tool_use_and_result", where: "message", stored: `srvtoolu_01`, counted: true,
		artifact: `{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"go 1.26 release"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://go.dev/doc/go1.26","title":"Go 1.26","encrypted_content":"EqgfCioIARgBIiQ3","page_age":"2026-02-01"}]},{"type":"text","text":"Go 1.26 is out."}]}`},
	{name: "code_execution_container_upload", where: "block", stored: `container_upload`, counted: true,
		artifact: `{"type":"container_upload","file_id":"file_011CNha8iCJcU1wXNR6q4V8w"}`},
	{name: "tool_reference", where: "results", stored: `tool_reference`, counted: true,
		artifact: `{"type":"tool_reference","tool_name":"Read"}`},
	{name: "cache_edits", where: "results", stored: `cache_edits`, counted: true,
		artifact: `{"type":"cache_edits","edits":[{"type":"delete","cache_reference":"toolu_0"}]}`},
	{name: "search_result", where: "results", stored: `search_result`, counted: true,
		artifact: `{"type":"search_result","source":"https://example.com","title":"t","content":[{"type":"text","text":"hit"}],"citations":{"enabled":true}}`},
	{name: "unknown_future_block", where: "results", stored: `hologram_2031`, counted: true,
		artifact: `{"type":"hologram_2031","payload":{"k":[1,2,{"z":null}]}}`},
	{name: "context_management_clear_thinking_first", where: "top",
		artifact: `"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}},{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":30000},"keep":{"type":"tool_uses","value":3},"clear_at_least":{"type":"input_tokens","value":5000}}]}`},
	{name: "container", where: "top", artifact: `"container":"container_011CNha8iCJcU1wXNR6q4V8w"`},
	{name: "pause_after_compaction", where: "top",
		artifact: `"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":150000},"pause_after_compaction":true}]}`},
}

// TestConformanceMessages: each Messages artifact through an offload.
func TestConformanceMessages(t *testing.T) {
	for _, row := range messagesRows {
		t.Run(row.name, func(t *testing.T) { runMessagesRow(t, row) })
	}
}

// TestConformanceMessagesCompaction: each Messages artifact in the newest
// message of a conversation that ctxd compacts once the upstream accepted
// the request that crossed the threshold: that request and the next,
// compacted one carry it byte for byte. A message before the newest person prompt is summarized with
// the rest, as designed, so the rows of whole messages are left out; but
// for the provider's compaction block: the estimate counts from it on, so
// ctxd does not compact at all.
func TestConformanceMessagesCompaction(t *testing.T) {
	for _, row := range messagesRows {
		if row.where == "message" && row.name != "compaction_block" {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			f := newFixture(t, testConfig())
			hdr := map[string]string{HeaderContextLimit: "6000", "Anthropic-Beta": "context-management-2025-06-27,compact-2026-01-12"}
			c := longConversationUsage(f, 8, 250, hdr, func(i int) int { return 500 * (i + 1) })
			switch row.where {
			case "results", "block":
				last := c.msgs[len(c.msgs)-1]
				c.msgs[len(c.msgs)-1] = last[:len(last)-2] + "," + row.artifact + "]}"
			case "message":
				c.assistant(row.artifact).user("go on")
			case "top":
				c.extra += "," + row.artifact
			}
			if row.name != "compaction_block" {
				f.up.script(crossingAnswer(4500))
			}
			before := len(f.up.requests())
			resp, _ := f.post(c.body(), hdr)
			id := resp.Header.Get(HeaderSessionID)
			f.jobsDone(id)
			want := 1
			if row.name == "compaction_block" {
				// The provider dropped what precedes its compaction: the
				// estimate counts from it on, far under the threshold.
				want = 0
			}
			if cs := compactions(t, f, id); len(cs) != want {
				t.Fatalf("compactions %v, want %d; diagnostic %q; the session's log:%s", cs, want, resp.Header.Get(HeaderDiagnostic), sessionLog(f, id))
			}
			c.assistant(assistantText("ok")).user("thanks")
			resp2, _ := f.post(c.body(), hdr)
			if resp2.Header.Get(HeaderSessionID) != id || resp2.Header.Get(HeaderDiagnostic) != "" {
				t.Errorf("the next request: session %q (want %q), diagnostic %q", resp2.Header.Get(HeaderSessionID), id, resp2.Header.Get(HeaderDiagnostic))
			}
			f.settle()
			reqs := f.up.requests()[before:]
			if len(reqs) != 2 {
				t.Fatalf("%d upstream requests after the compaction", len(reqs))
			}
			for i, r := range reqs {
				if n := len(outgoingMessages(t, r.body)); want == 1 && i == 1 && n >= len(c.msgs) {
					t.Errorf("request %d was not compacted", i+1)
				}
				want := row.artifact
				if i == 0 && (row.where == "results" || row.where == "block") {
					want = row.artifact[:len(row.artifact)-1] + `,"cache_control":{"type":"ephemeral"}}`
				}
				if !bytes.Contains(r.body, []byte(want)) {
					t.Errorf("request %d after the compaction: the artifact did not arrive byte for byte: want %s in\n%s", i+1, want, lastBytes(r.body, 3000))
				}
			}
		})
	}
}

func runMessagesRow(t *testing.T, row conformRow) {
	f := newFixture(t, testConfig())
	c := newConversation()
	switch row.where {
	case "message":
		c.user("fix the build").assistant(row.artifact).user("go on")
	case "block":
		c.msgs = append(c.msgs, `{"role":"user","content":[{"type":"text","text":"fix the build"},`+row.artifact+`]}`)
		c.assistant(assistantText("Looking.")).user("go on")
	case "top":
		c.extra += "," + row.artifact
		c.user("fix the build")
	default:
		c.user("fix the build")
	}
	hdr := map[string]string{"Anthropic-Beta": "context-management-2025-06-27,compact-2026-01-12"}
	call := assistantCall("toolu_1", "Bash", `{"command":"cat big.log"}`)
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"cat big.log"}`}}, 100, 5)})
	r1, _ := f.post(c.body(), hdr)
	c.assistant(call)
	result := `{"type":"tool_result","tool_use_id":"toolu_1","content":` + jsonString(conformBig) + `}`
	if row.where == "results" {
		c.msgs = append(c.msgs, `{"role":"user","content":[`+result+`,`+row.artifact+`]}`)
	} else {
		c.msgs = append(c.msgs, `{"role":"user","content":[`+result+`]}`)
	}
	f.up.script(textAnswer("The log says the linker failed."))
	r2, _ := f.post(c.body(), hdr)
	c.assistant(assistantText("The log says the linker failed.")).user("thanks, fix it")
	r3, _ := f.post(c.body(), hdr)
	for i, r := range []*httpResp{{r1.StatusCode, r1.Header.Get(HeaderDiagnostic)}, {r2.StatusCode, r2.Header.Get(HeaderDiagnostic)}, {r3.StatusCode, r3.Header.Get(HeaderDiagnostic)}} {
		if r.status != 200 || r.diagnostic != "" {
			t.Errorf("request %d: %d, diagnostic %q", i+1, r.status, r.diagnostic)
		}
	}
	id := r3.Header.Get(HeaderSessionID)
	if id == "" || id != r1.Header.Get(HeaderSessionID) {
		t.Fatalf("not one managed session: %q %q", r1.Header.Get(HeaderSessionID), id)
	}
	f.settle()
	reqs := f.up.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	// The rewrite happened: the tool output left as an artifact reference.
	for _, r := range reqs[1:] {
		if bytes.Contains(r.body, []byte(conformBig[:4000])) || !bytes.Contains(r.body, []byte("artifact://")) {
			t.Fatalf("the tool result was not offloaded (%d bytes sent)", len(r.body))
		}
	}
	// Carried: the artifact, byte for byte, in every request that holds it.
	from := 0
	if row.where == "results" {
		from = 1 // the client's request 2 is the first to hold it
	}
	for i := from; i < 3; i++ {
		want := row.artifact
		if row.where == "results" && i == 1 {
			// The newest message's last block carries the moving marker.
			want = row.artifact[:len(row.artifact)-1] + `,"cache_control":{"type":"ephemeral"}}`
		}
		if !bytes.Contains(reqs[i].body, []byte(want)) {
			t.Errorf("request %d: the artifact did not arrive byte for byte: want %s in\n%s", i+1, want, reqs[i].body[:min(len(reqs[i].body), 1500)])
		}
	}
	checkStored(t, f, id, row)
}

type httpResp struct {
	status     int
	diagnostic string
}

// checkStored asserts what the session's history holds of the row's
// artifact and that the estimate counts it.
func checkStored(t *testing.T, f *fixture, id string, row conformRow) {
	t.Helper()
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	found := false
	for _, m := range a.Messages {
		enc, err := history.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(enc)
		if row.stored == "" || !bytes.Contains(enc, []byte(row.stored)) {
			continue
		}
		found = true
		if !row.counted {
			continue
		}
		// The estimate of the message with and without the block(s)
		// holding the artifact.
		var est history.Estimator
		for i, b := range m.Content {
			be, _ := json.Marshal(b)
			if !bytes.Contains(be, []byte(row.stored)) && !(m.Role == history.RoleSystem && row.stored == `"role":"system"`) {
				continue
			}
			without := m
			without.Content = append(append([]history.Block(nil), m.Content[:i]...), m.Content[i+1:]...)
			if d := est.Message(m) - est.Message(without); d <= history.BlockOverheadTokens {
				t.Errorf("the estimate counts the stored %s block as %d tokens", b.Type, d)
			}
		}
	}
	switch {
	case row.stored == "":
		if frag := conformFragment(row.artifact); frag != "" && bytes.Contains(all.Bytes(), []byte(frag)) {
			t.Errorf("the artifact is stored in the history:\n%s", all.Bytes())
		}
	case !found:
		t.Errorf("the stored history holds no %s:\n%s", row.stored, all.Bytes())
	}
}

// conformFragment is a part of a top-level artifact that would show it
// stored: its value.
func conformFragment(artifact string) string {
	if i := strings.Index(artifact, `":`); i > 0 && strings.HasPrefix(artifact, `"`) {
		return artifact[i+2:]
	}
	return artifact
}

// TestConformanceResponses: the OpenAI Responses API's artifacts.
func TestConformanceResponses(t *testing.T) {
	rows := []conformRow{
		{name: "compaction_item", where: "message", stored: `cmp_01`, counted: true,
			artifact: `{"type":"compaction","id":"cmp_01","encrypted_content":"gAAAAABpCOMPACTED-0123456789abcdefghijklmnopqrstuvwxyz0123456789"}`},
		// A reasoning item goes before the output it led to (alone, it
		// is an interrupted response: not replayed).
		{name: "reasoning_encrypted_content", where: "message", stored: `rs_77`, counted: true,
			artifact: `{"type":"reasoning","id":"rs_77","summary":[],"content":null,"encrypted_content":"gAAAAABpREASONING-0123456789abcdefghijklmnopqrstuvwxyz"}`,
			follow:   `{"type":"message","role":"assistant","id":"msg_8","content":[{"type":"output_text","text":"Reading the log.","annotations":[]}]}`},
		// A reasoning item before a hosted tool's call (a web search the
		// provider ran) stays with that turn.
		{name: "reasoning_before_web_search_call", where: "message", stored: `rs_78`, counted: true,
			artifact: `{"type":"reasoning","id":"rs_78","summary":[],"content":null,"encrypted_content":"gAAAAABpREASONING-78-0123456789abcdefghijklmnopqrstuvwxyz"}`,
			follow:   `{"type":"web_search_call","id":"ws_02","status":"completed","action":{"type":"search","query":"go 1.26"}},{"type":"message","role":"assistant","id":"msg_7","content":[{"type":"output_text","text":"Go 1.26 is out.","annotations":[]}]}`},
		// phase is carried as the client's bytes; the stored text keeps
		// the phase, so a rebuilt request carries it.
		{name: "assistant_message_phase", where: "message", stored: `"text":"I will read the log first.","phase":"commentary"`, counted: true,
			artifact: `{"type":"message","role":"assistant","id":"msg_9","phase":"commentary","content":[{"type":"output_text","text":"I will read the log first.","annotations":[]}]}`},
		{name: "web_search_call", where: "message", stored: `ws_01`, counted: true,
			artifact: `{"type":"web_search_call","id":"ws_01","status":"completed","action":{"type":"search","query":"go 1.26"}}`},
		{name: "prompt_cache_retention", where: "top", artifact: `"prompt_cache_retention":"24h"`},
		{name: "context_management_compact_threshold", where: "top", artifact: `"context_management":[{"type":"compaction","compact_threshold":200000}]`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) { runResponsesRow(t, row) })
	}
}

func runResponsesRow(t *testing.T, row conformRow) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	hdr := map[string]string{"Session-Id": "0199-conform-" + row.name}
	c := newCodexConversation()
	extra := ""
	switch row.where {
	case "message":
		if row.follow != "" {
			c.add(row.artifact, row.follow)
		} else {
			c.add(row.artifact)
		}
		c.add(`{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}`)
	case "top":
		extra = "," + row.artifact
	}
	call := `{"type":"function_call","id":"fc_1","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"cat big.log\"}"}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{call}, 3000, 0, 40)})
	r1, _ := f.postOpenAI("/v1/responses", c.body(extra), hdr)
	c.add(call, `{"type":"function_call_output","call_id":"call_1","output":`+jsonString(conformBig)+`}`)
	answer := `{"type":"message","role":"assistant","id":"msg_2","content":[{"type":"output_text","text":"The linker failed.","annotations":[]}]}`
	f.up.script(reply{stream: true, body: responsesSSE([]string{answer}, 3100, 2900, 10)})
	r2, _ := f.postOpenAI("/v1/responses", c.body(extra), hdr)
	c.add(answer, `{"type":"message","role":"user","content":[{"type":"input_text","text":"thanks, fix it"}]}`)
	f.up.script(reply{stream: true, body: responsesSSE([]string{answer}, 3200, 3000, 10)})
	r3, _ := f.postOpenAI("/v1/responses", c.body(extra), hdr)
	for i, r := range []*httpResp{{r1.StatusCode, r1.Header.Get(HeaderDiagnostic)}, {r2.StatusCode, r2.Header.Get(HeaderDiagnostic)}, {r3.StatusCode, r3.Header.Get(HeaderDiagnostic)}} {
		if r.status != 200 || r.diagnostic != "" {
			t.Errorf("request %d: %d, diagnostic %q", i+1, r.status, r.diagnostic)
		}
	}
	id := r3.Header.Get(HeaderSessionID)
	if id == "" || id != r1.Header.Get(HeaderSessionID) {
		t.Fatalf("not one managed session: %q %q", r1.Header.Get(HeaderSessionID), id)
	}
	f.settle()
	reqs := f.up.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for _, r := range reqs[1:] {
		if bytes.Contains(r.body, []byte(conformBig[:4000])) || !bytes.Contains(r.body, []byte("artifact://")) {
			t.Fatalf("the tool output was not offloaded (%d bytes sent)", len(r.body))
		}
	}
	for i, r := range reqs {
		if !bytes.Contains(r.body, []byte(row.artifact)) {
			t.Errorf("request %d: the artifact did not arrive byte for byte: want %s in\n%s", i+1, row.artifact, r.body[:min(len(r.body), 1500)])
		}
	}
	checkStored(t, f, id, row)
	// Cached tokens: the answer's input_tokens_details.cached_tokens is
	// recorded as a cache read.
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	last := a.Messages[len(a.Messages)-1]
	if last.Usage == nil || last.Usage.CacheReadInputTokens != 3000 || last.Usage.InputTokens != 200 {
		t.Errorf("cached tokens not recorded as a cache read: %+v", last.Usage)
	}
}

// TestConformanceChat: the Chat Completions API's artifacts.
func TestConformanceChat(t *testing.T) {
	rows := []conformRow{
		{name: "reasoning_content", where: "message", stored: `verify the linker flags`, counted: true,
			artifact: `{"role":"assistant","content":"Checking.","reasoning_content":"I should verify the linker flags first."}`},
		{name: "stream_options_include_usage", where: "top", artifact: `"stream_options":{"include_usage":true}`},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) { runChatRow(t, row) })
	}
}

func runChatRow(t *testing.T, row conformRow) {
	f := newOpenAIFixture(t, openAIConfig(func(c *config.Config) {
		c.Models["gpt-local-1"] = config.Model{ContextLimit: 200000, TokenFactor: 1}
	}))
	hdr := map[string]string{"Session_id": "pi-conform-" + row.name}
	msgs := []string{`{"role":"system","content":"You are pi."}`, `{"role":"user","content":"fix the build"}`}
	extra := ""
	switch row.where {
	case "message":
		msgs = append(msgs, row.artifact, `{"role":"user","content":"go on"}`)
	case "top":
		extra = "," + row.artifact
	}
	body := func() string {
		return `{"model":"gpt-local-1","messages":[` + strings.Join(msgs, ",") + `],"tools":[{"type":"function","function":{"name":"bash","description":"run","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],"stream":true` + extra + `}`
	}
	f.up.script(reply{stream: true, body: chatSSE("", [][3]string{{"call_1", "bash", `{"command":"cat big.log"}`}}, true)})
	r1, b1 := f.postOpenAI("/v1/chat/completions", body(), hdr)
	msgs = append(msgs, `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"cat big.log\"}"}}]}`,
		`{"role":"tool","tool_call_id":"call_1","content":`+jsonString(conformBig)+`}`)
	f.up.script(reply{stream: true, body: chatSSE("The linker failed.", nil, true)})
	r2, _ := f.postOpenAI("/v1/chat/completions", body(), hdr)
	msgs = append(msgs, `{"role":"assistant","content":"The linker failed."}`, `{"role":"user","content":"thanks, fix it"}`)
	f.up.script(reply{stream: true, body: chatSSE("Fixed.", nil, true)})
	r3, _ := f.postOpenAI("/v1/chat/completions", body(), hdr)
	for i, r := range []*httpResp{{r1.StatusCode, r1.Header.Get(HeaderDiagnostic)}, {r2.StatusCode, r2.Header.Get(HeaderDiagnostic)}, {r3.StatusCode, r3.Header.Get(HeaderDiagnostic)}} {
		if r.status != 200 || r.diagnostic != "" {
			t.Errorf("request %d: %d, diagnostic %q", i+1, r.status, r.diagnostic)
		}
	}
	if row.where == "top" && !bytes.Contains(b1, []byte(`"usage":{"prompt_tokens":1200`)) {
		t.Errorf("the client asked for usage and did not get the usage chunk:\n%s", b1)
	}
	id := r3.Header.Get(HeaderSessionID)
	if id == "" || id != r1.Header.Get(HeaderSessionID) {
		t.Fatalf("not one managed session: %q %q", r1.Header.Get(HeaderSessionID), id)
	}
	f.settle()
	reqs := f.up.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for _, r := range reqs[1:] {
		if bytes.Contains(r.body, []byte(conformBig[:4000])) || !bytes.Contains(r.body, []byte("artifact://")) {
			t.Fatalf("the tool output was not offloaded (%d bytes sent)", len(r.body))
		}
	}
	for i, r := range reqs {
		if !bytes.Contains(r.body, []byte(row.artifact)) {
			t.Errorf("request %d: the artifact did not arrive byte for byte: want %s in\n%s", i+1, row.artifact, r.body[:min(len(r.body), 1500)])
		}
	}
	checkStored(t, f, id, row)
	// Cached tokens: the answer's prompt_tokens_details.cached_tokens is
	// recorded as a cache read.
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	last := a.Messages[len(a.Messages)-1]
	if last.Usage == nil || last.Usage.CacheReadInputTokens != 1000 || last.Usage.InputTokens != 200 {
		t.Errorf("cached tokens not recorded as a cache read: %+v", last.Usage)
	}
}

// TestConformanceMessagesEditPass: each Messages artifact beside a tool
// result that ctxd's context editing elides later (an edit stub in place
// of the result): the rewritten message carries the artifact byte for
// byte, in the request the pass rewrote and the next one.
func TestConformanceMessagesEditPass(t *testing.T) {
	for _, row := range messagesRows {
		if row.where != "results" {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ContextEditing.Enabled = true
			cfg.ContextEditing.KeepRecentTurns = 1
			cfg.ContextEditing.MinCharsToElide = 100
			cfg.ContextEditing.MaxTotalToolResultChars = 1000
			cfg.ContextEditing.MinCharsPerPass = 500
			f := newFixture(t, cfg)
			first := strings.Repeat("first output line\n", 150)
			c := newConversation()
			for i := range 4 {
				id := fmt.Sprintf("toolu_%02d", i)
				input := fmt.Sprintf(`{"command":"step %d"}`, i)
				c.user(fmt.Sprintf("run step %d", i))
				f.up.script(reply{stream: true, body: sse("", "", [][3]string{{id, "Bash", input}}, 100, 5)})
				f.post(c.body(), nil)
				c.assistant(assistantCall(id, "Bash", input))
				out := strings.Repeat(fmt.Sprintf("output of step %d\n", i), 150)
				result := `{"type":"tool_result","tool_use_id":"` + id + `","content":` + jsonString(out) + `}`
				if i == 0 {
					result = `{"type":"tool_result","tool_use_id":"` + id + `","content":` + jsonString(first) + `},` + row.artifact
				}
				c.msgs = append(c.msgs, `{"role":"user","content":[`+result+`]}`)
				f.up.script(textAnswer(fmt.Sprintf("step %d ran", i)))
				f.post(c.body(), nil)
				c.assistant(assistantText(fmt.Sprintf("step %d ran", i)))
			}
			c.user("what failed?")
			before := len(f.up.requests())
			resp, _ := f.post(c.body(), nil)
			if d := resp.Header.Get(HeaderDiagnostic); d != "" || resp.Header.Get(HeaderSessionID) == "" {
				t.Fatalf("not managed: diagnostic %q", d)
			}
			f.settle()
			reqs := f.up.requests()
			out := reqs[before].body
			if bytes.Contains(out, []byte(first[:400])) || !bytes.Contains(out, []byte("ctxd elided this old tool result")) {
				t.Fatalf("no edit pass elided the first result:\n%s", lastBytes(out, 3000))
			}
			for i, r := range reqs {
				if i < 2 {
					continue // the artifact is sent from the second request on
				}
				if !bytes.Contains(r.body, []byte(row.artifact)) {
					t.Errorf("request %d: the artifact did not arrive byte for byte: want %s in\n%s", i+1, row.artifact, lastBytes(r.body, 3000))
				}
			}
		})
	}
}

// conformServerTool and conformSearchResult are a web search the
// provider ran inside an answer: its server_tool_use and result blocks.
const (
	conformServerTool   = `{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"go 1.26 release"}}`
	conformSearchResult = `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://go.dev/doc/go1.26","title":"Go 1.26","encrypted_content":"EqgfCioIARgBIiQ3","page_age":"2026-02-01"}]}`
)

// serverToolSSE is a streamed answer that runs a web search (its input
// streamed in input_json_delta events, as the provider does) and then
// calls a client tool.
func serverToolSSE(id, name, input string) string {
	var b strings.Builder
	ev := func(typ, data string) { fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ, data) }
	ev("message_start", `{"type":"message_start","message":{"id":"msg_s","type":"message","role":"assistant","model":"claude-opus-4-8","content":[],"usage":{"input_tokens":100,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`)
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{}}}`)
	ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\": "}}`)
	ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"go 1.26 release\"}"}}`)
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":`+conformSearchResult+`}`)
	ev("content_block_stop", `{"type":"content_block_stop","index":1}`)
	ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, id, name))
	in, _ := json.Marshal(input)
	ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":%s}}`, in))
	ev("content_block_stop", `{"type":"content_block_stop","index":2}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}`)
	ev("message_stop", `{"type":"message_stop"}`)
	return b.String()
}

// TestConformanceEditPassAssistantBlocks: a web search the provider ran
// in a streamed answer (server_tool_use, its input streamed in deltas, and
// web_search_tool_result) is recorded as the client sends it back, so the
// next request carries the client's bytes; and when an edit pass later
// clears that answer's tool call input (a long string field,
// docs/design.md §6), the rewritten message still carries both blocks
// byte for byte.
func TestConformanceEditPassAssistantBlocks(t *testing.T) {
	server := conformServerTool + "," + conformSearchResult
	cfg := testConfig()
	cfg.ContextEditing.Enabled = true
	cfg.ContextEditing.KeepRecentTurns = 1
	cfg.ContextEditing.MinCharsToElide = 100
	cfg.ContextEditing.MaxTotalToolResultChars = 1000
	cfg.ContextEditing.MinCharsPerPass = 500
	f := newFixture(t, cfg)
	long := strings.Repeat("package main // a long file body\n", 60)
	c := newConversation()
	for i := range 4 {
		id := fmt.Sprintf("toolu_%02d", i)
		input := fmt.Sprintf(`{"path":"f%d.go","content":%s}`, i, jsonString(long))
		call := `{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"Write","input":` + input + `}]}`
		answer := reply{stream: true, body: sse("", "", [][3]string{{id, "Write", input}}, 100, 5)}
		if i == 0 {
			call = `{"role":"assistant","content":[` + server + `,{"type":"tool_use","id":"` + id + `","name":"Write","input":` + input + `}]}`
			answer = reply{stream: true, body: serverToolSSE(id, "Write", input)}
		}
		c.user(fmt.Sprintf("write file %d", i))
		f.up.script(answer)
		f.post(c.body(), nil)
		c.assistant(call).results([2]string{id, strings.Repeat(fmt.Sprintf("wrote f%d.go\n", i), 100)})
		f.up.script(textAnswer(fmt.Sprintf("file %d written", i)))
		f.post(c.body(), nil)
		c.assistant(assistantText(fmt.Sprintf("file %d written", i)))
	}
	c.user("done?")
	before := len(f.up.requests())
	resp, _ := f.post(c.body(), nil)
	if d := resp.Header.Get(HeaderDiagnostic); d != "" {
		t.Fatalf("diagnostic %q", d)
	}
	f.settle()
	reqs := f.up.requests()
	if !bytes.Contains(reqs[1].body, []byte(server)) {
		t.Errorf("the request after the answer does not carry the web search as the client sent it:\n%s", reqs[1].body[:min(len(reqs[1].body), 3000)])
	}
	out := reqs[before].body
	if bytes.Count(out, []byte(long[:200])) >= 4 {
		t.Fatalf("no edit pass cleared the first call's input:\n%s", lastBytes(out, 3000))
	}
	if !bytes.Contains(out, []byte(`{"role":"assistant","content":[`+server+`,{"type":"tool_use","id":"toolu_00"`)) {
		t.Errorf("the server-tool blocks did not arrive byte for byte in the rewritten message:\n%s", out[:min(len(out), 4000)])
	}
}
