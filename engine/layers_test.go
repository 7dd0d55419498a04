package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/contextedit"
	"github.com/ctxd/ctxd/history"
)

func layersConfig(dir string) config.Config {
	cfg := config.Defaults()
	cfg.Offload.Dir = dir
	return cfg
}

func TestOffloadThroughTheEngine(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, layersConfig(dir+"/offload"), dir+"/db")
	h.create("s", 200000)
	big := strings.Repeat("line of build output ✓\n", 220000) // ~5 MB
	res := h.append("s", user("build"), history.Message{Role: history.RoleAssistant, Content: []history.Block{
		{Type: history.BlockToolCall, ID: "b1", Name: "bash", Input: json.RawMessage(`{"command":"make"}`)}}},
		history.Message{Role: history.RoleTool, ToolCallID: "b1", ToolName: "bash", Content: []history.Block{{Type: history.BlockText, Text: big}}})
	stored := res.Messages[2]
	stub := stored.Content[0].Text
	if len(stub) > 20000 || !strings.Contains(stub, fmt.Sprintf("%d bytes", len(big))) {
		t.Fatalf("stored result is not a stub (%d bytes): %.200s", len(stub), stub)
	}
	evs := h.events("s", checkpoint.KindOffload)
	if len(evs) != 1 {
		t.Fatalf("%d offload events", len(evs))
	}
	var rec struct {
		Path     string `json:"path"`
		Artifact string `json:"artifact"`
	}
	if err := json.Unmarshal(evs[0].Data, &rec); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(rec.Path)
	if err != nil || !bytes.Equal(file, []byte(big)) {
		t.Fatalf("offload file differs from the original (%v)", err)
	}
	id, err := artifacts.ParseURI(rec.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	content, _, err := h.arts.Get(context.Background(), id)
	if err != nil || !bytes.Equal(content, []byte(big)) {
		t.Fatalf("artifact differs from the original (%v)", err)
	}
	if a := h.context("s"); a.Messages[2].Content[0].Text != stub {
		t.Fatal("the context does not carry the stub")
	}
	if info, _ := h.e.Session(context.Background(), "s"); info.Offloads != 1 {
		t.Fatalf("Offloads = %d", info.Offloads)
	}
}

// One append carrying many oversized results (a conversation the proxy
// sees for the first time) offloads each to its own file, and each stored
// message, offload event and file belongs to its own result, in order.
func TestManyResultsOfOneAppendAreOffloadedEachToItsOwn(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, layersConfig(dir+"/offload"), dir+"/db")
	h.create("s", 2000000)
	msgs := []history.Message{user("build everything")}
	texts := map[string]string{}
	for i := range 20 {
		id := fmt.Sprintf("b%d", i)
		text := fmt.Sprintf("output of step %d\n", i) + strings.Repeat(fmt.Sprintf("line %d of step %d\n", i, i), 2000)
		if i%5 == 4 {
			text = fmt.Sprintf("step %d: ok", i) // small: kept whole
		}
		texts[id] = text
		msgs = append(msgs, history.Message{Role: history.RoleAssistant, Content: []history.Block{
			{Type: history.BlockToolCall, ID: id, Name: "bash", Input: json.RawMessage(`{"command":"make"}`)}}},
			history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "bash", Content: []history.Block{{Type: history.BlockText, Text: text}}})
	}
	res := h.append("s", msgs...)
	var offloaded []string
	for i, m := range res.Messages {
		if m.Role != history.RoleTool {
			continue
		}
		if m.ToolCallID != msgs[i].ToolCallID {
			t.Fatalf("stored message %d is %s's result, want %s's", i, m.ToolCallID, msgs[i].ToolCallID)
		}
		text, got := texts[m.ToolCallID], m.Content[0].Text
		if len(text) < 100 {
			if got != text {
				t.Fatalf("small result %s changed: %q", m.ToolCallID, got)
			}
			continue
		}
		offloaded = append(offloaded, m.ToolCallID)
		if !strings.Contains(got, strings.SplitN(text, "\n", 2)[0]) || !strings.Contains(got, fmt.Sprintf("%d bytes", len(text))) {
			t.Fatalf("%s's stub is not of its own result: %.200s", m.ToolCallID, got)
		}
	}
	evs := h.events("s", checkpoint.KindOffload)
	if len(evs) != len(offloaded) || len(offloaded) != 16 {
		t.Fatalf("%d offload events for %d offloaded results, want 16", len(evs), len(offloaded))
	}
	for k, ev := range evs {
		var rec struct {
			ToolCallID string `json:"tool_call_id"`
			Path       string `json:"path"`
		}
		if err := json.Unmarshal(ev.Data, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.ToolCallID != offloaded[k] {
			t.Fatalf("offload event %d is %s's, want %s's (the results' order)", k, rec.ToolCallID, offloaded[k])
		}
		if file, err := os.ReadFile(rec.Path); err != nil || string(file) != texts[rec.ToolCallID] {
			t.Fatalf("%s's offload file differs from its result (%v)", rec.ToolCallID, err)
		}
	}
}

// toolRound appends one assistant call and its result of n words.
func toolRound(h *harness, id, tool string, n int) {
	h.append("s",
		history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: tool, Input: json.RawMessage(`{}`)}}},
		history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: tool, Content: []history.Block{{Type: history.BlockText, Text: words(n)}}})
}

func TestContextEditingFiresOncePerThresholdAndReusesStubs(t *testing.T) {
	cfg := config.Defaults()
	cfg.Offload.Enabled = false
	h := newHarness(t, cfg, "")
	h.create("s", 1000000)
	h.append("s", user("investigate"))
	// 8 results of ~15,000 characters: 120,000 > 100,000 raw.
	for i := range 6 {
		toolRound(h, fmt.Sprintf("r%d", i), "grep", 3000)
	}
	if n := len(h.events("s", checkpoint.KindContextEdit)); n != 0 {
		t.Fatalf("%d passes below the threshold", n)
	}
	toolRound(h, "todo1", "todo", 3000) // protected
	toolRound(h, "r6", "grep", 3000)
	toolRound(h, "r7", "grep", 3000)
	passes := h.events("s", checkpoint.KindContextEdit)
	if len(passes) != 1 {
		t.Fatalf("%d passes, want exactly 1", len(passes))
	}
	var p struct {
		Elided     []string `json:"elided"`
		CharsSaved uint64   `json:"chars_saved"`
	}
	_ = json.Unmarshal(passes[0].Data, &p)
	for _, id := range p.Elided {
		if id == "todo1" {
			t.Fatal("a protected tool was elided")
		}
	}
	if p.CharsSaved < cfg.ContextEditing.MinCharsPerPass {
		t.Fatalf("pass saved %d characters", p.CharsSaved)
	}
	// Each elided result is sent as the stub of the result stored (its
	// size counted from it), wherever the assembly takes the size from.
	stored := map[string]history.Message{}
	for _, ev := range h.events("s", checkpoint.KindMessage) {
		stored[ev.Message.ToolCallID] = *ev.Message
	}
	elided := 0
	for _, m := range h.context("s").Messages {
		if m.Role == history.RoleTool && slices.Contains(p.Elided, m.ToolCallID) {
			elided++
			if want := contextedit.Stub(stored[m.ToolCallID], ""); len(m.Content) != 1 || m.Content[0].Text != want {
				t.Fatalf("elided %s sent as %+v, want %q", m.ToolCallID, m.Content, want)
			}
		}
	}
	if elided == 0 {
		t.Fatal("no elided result in the context")
	}
	// Between passes the same stubs are re-sent byte for byte.
	first := encodeAll(t, h.context("s"))
	h.append("s", assistant("thinking about it"))
	second := encodeAll(t, h.context("s"))
	if !strings.HasPrefix(second, first) {
		t.Fatal("the next request does not extend the previous one byte for byte")
	}
	// A small new result is not enough for another pass.
	toolRound(h, "r8", "grep", 100)
	if n := len(h.events("s", checkpoint.KindContextEdit)); n != 1 {
		t.Fatalf("%d passes after a small result, want still 1", n)
	}
	info, _ := h.e.Session(context.Background(), "s")
	if info.ContextEditPasses != 1 || info.EditedTokens == 0 {
		t.Fatalf("info: passes %d edited tokens %d", info.ContextEditPasses, info.EditedTokens)
	}
}

func TestAuthoredProtectListReplacesTheDefault(t *testing.T) {
	cfg := config.Defaults()
	cfg.Offload.Enabled = false
	cfg.ContextEditing.ProtectToolNames = []string{"plan"}
	h := newHarness(t, cfg, "")
	h.create("s", 1000000)
	h.append("s", user("go"))
	toolRound(h, "todo1", "todo", 3000)
	for i := range 8 {
		toolRound(h, fmt.Sprintf("r%d", i), "grep", 3000)
	}
	passes := h.events("s", checkpoint.KindContextEdit)
	if len(passes) == 0 || !bytes.Contains(passes[0].Data, []byte(`"todo1"`)) {
		t.Fatal("todo is still protected by an authored list without it")
	}
}

// Restart mid-session with offloads and a context-edit pass: the next
// assembled context is byte-identical to what the live engine sent.
func TestResumeRebuildsTheSameContextWithLayers(t *testing.T) {
	dir := t.TempDir()
	cfg := layersConfig(dir + "/offload")
	h := newHarness(t, cfg, dir+"/db")
	h.create("s", 1000000)
	h.append("s", user("go"))
	for i := range 9 {
		toolRound(h, fmt.Sprintf("r%d", i), "bash", 3000)
	}
	toolRound(h, "big", "bash", 20000) // offloaded
	h.append("s", withUsage(assistant("summary so far"), 50000, 100), user("next"))
	want := encodeAll(t, h.context("s"))
	wantInfo, _ := h.e.Session(context.Background(), "s")
	if wantInfo.ContextEditPasses == 0 || wantInfo.Offloads == 0 {
		t.Fatalf("the scenario needs a pass and an offload: %+v", wantInfo)
	}
	h.Close()

	h2 := newHarness(t, cfg, dir+"/db")
	if got := encodeAll(t, h2.context("s")); got != want {
		t.Fatal("the context after a restart differs from the live one")
	}
	info, _ := h2.e.Session(context.Background(), "s")
	if info.Tokens != wantInfo.Tokens || info.ContextEditPasses != wantInfo.ContextEditPasses || info.Offloads != wantInfo.Offloads {
		t.Fatalf("after restart: %+v\nbefore: %+v", info, wantInfo)
	}
}

// After a pass in a session with signed thinking, no request carries
// thinking produced before the rewrite point. The pass waits for the end of
// the tool loop (docs/design.md §4a).
func TestPassWithholdsEarlierThinking(t *testing.T) {
	cfg := config.Defaults()
	cfg.Offload.Enabled = false
	h := newHarness(t, cfg, "")
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: "claude-sonnet-4-5"}); err != nil {
		t.Fatal(err)
	}
	h.append("s", user("go"))
	for i := range 10 {
		id := fmt.Sprintf("r%d", i)
		h.append("s",
			history.Message{Role: history.RoleAssistant, Content: []history.Block{
				{Type: history.BlockThinking, Text: fmt.Sprintf("reasoning %d", i), Signature: "sig" + id},
				{Type: history.BlockToolCall, ID: id, Name: "bash", Input: json.RawMessage(`{}`)}}},
			history.Message{Role: history.RoleTool, ToolCallID: id, ToolName: "bash", Content: []history.Block{{Type: history.BlockText, Text: words(3000)}}})
	}
	if n := len(h.events("s", checkpoint.KindContextEdit)); n != 0 {
		t.Fatalf("%d passes inside the tool loop", n)
	}
	h.append("s", history.Message{Role: history.RoleAssistant, Content: []history.Block{
		{Type: history.BlockThinking, Text: "all done", Signature: "sig-end"}, {Type: history.BlockText, Text: "done"}}})
	passes := h.events("s", checkpoint.KindContextEdit)
	resets := h.events("s", checkpoint.KindPrefixReset)
	if len(passes) != 1 || len(resets) != 1 {
		t.Fatalf("%d passes, %d prefix resets; want 1 and 1", len(passes), len(resets))
	}
	var p struct {
		Withheld uint64 `json:"withheld_thinking_before"`
	}
	_ = json.Unmarshal(passes[0].Data, &p)
	if p.Withheld == 0 {
		t.Fatal("the pass withholds no thinking")
	}
	a := h.context("s")
	kept := 0
	for _, m := range a.Messages {
		for _, b := range m.Content {
			if b.Type != history.BlockThinking {
				continue
			}
			if m.Seq < p.Withheld {
				t.Fatalf("thinking of message %d (before the rewrite point %d) is still sent", m.Seq, p.Withheld)
			}
			if b.Signature == "" {
				t.Fatal("a thinking block lost its signature")
			}
			kept++
		}
	}
	if kept == 0 {
		t.Fatal("no thinking after the rewrite point is sent")
	}
}

// A file read larger than a quarter of the window cannot stay in context:
// it is offloaded although "read" is excluded, instead of being compacted
// away before the model sees it.
func TestOversizedReadIsOffloadedDespiteExclude(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, layersConfig(dir+"/offload"), dir+"/db")
	h.create("s", 30000) // a quarter: 7,500 tokens, 22,500 characters
	read := func(id string, n int) []history.Message {
		return []history.Message{
			{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: id, Name: "Read", Input: json.RawMessage(`{"file_path":"/src/big.go"}`)}}},
			{Role: history.RoleTool, ToolCallID: id, ToolName: "Read", Content: []history.Block{{Type: history.BlockText, Text: strings.Repeat("func f() {}\n", n)}}},
		}
	}
	res := h.append("s", append([]history.Message{user("read big.go")}, read("r1", 1000)...)...) // 12,000 characters: kept
	if res.Messages[2].Content[0].Text != strings.Repeat("func f() {}\n", 1000) {
		t.Fatal("a read under a quarter of the window was offloaded")
	}
	res = h.append("s", read("r2", 12500)...) // 150,000 characters
	if !strings.Contains(res.Messages[1].Content[0].Text, "150000 bytes") {
		t.Fatalf("the oversized read was not offloaded: %.200s", res.Messages[1].Content[0].Text)
	}
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil || a.Compacted {
		t.Fatalf("compacted=%v err=%v: the offloaded read should fit", a.Compacted, err)
	}
}

// A tool result with an image and 940k characters of text is offloaded by
// its text, the image kept; the next pre-send has nothing to compact, so
// the model sees the head and tail (they were summarized away before).
func TestMixedResultIsOffloadedByItsText(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, layersConfig(dir+"/offload"), "")
	h.create("s", 200000)
	image := history.Block{Type: history.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}
	text := "HEAD-MARK " + strings.Repeat("a line of a page's text, rendered\n", 940000/34) + " TAIL-MARK"
	res := h.append("s", user("screenshot the page and dump its text"),
		history.Message{Role: history.RoleAssistant, Content: []history.Block{
			{Type: history.BlockToolCall, ID: "p1", Name: "browser", Input: json.RawMessage(`{"url":"http://localhost/"}`)}}},
		history.Message{Role: history.RoleTool, ToolCallID: "p1", ToolName: "browser", Content: []history.Block{image, {Type: history.BlockText, Text: text}}})
	stored := res.Messages[2]
	if len(stored.Content) != 2 || stored.Content[0].Type != history.BlockImage || !strings.HasPrefix(stored.Content[1].Text, "[ctxd offloaded") {
		t.Fatalf("stored result: %d blocks, want the image and the stub", len(stored.Content))
	}
	a, err := h.e.Context(context.Background(), "s", ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Compacted || a.CheckpointSeq != 0 {
		t.Fatal("the pre-send compacted the result away")
	}
	got := a.Messages[2].Content[1].Text
	if !strings.Contains(got, "HEAD-MARK") || !strings.Contains(got, "TAIL-MARK") {
		t.Fatal("the model does not see the head and tail")
	}
}

// A 40 KB write input is not re-sent verbatim forever (clear_tool_inputs,
// docs/design.md §6): once its turn is older than keep_recent_turns a pass sends
// its content as a one-line stub, the input an object of the same keys;
// the pass is recorded, and a restart serves byte-identical context.
func TestPassClearsA40KBWriteInput(t *testing.T) {
	dir := t.TempDir()
	cfg := layersConfig(dir + "/offload")
	cfg.ContextEditing.MaxTotalToolResultChars = 30000
	cfg.ContextEditing.MinCharsPerPass = 20000
	h := newHarness(t, cfg, dir+"/db")
	h.create("s", 200000)
	content := strings.Repeat("package main // generated line\n", 40*1024/31)
	in, _ := json.Marshal(map[string]string{"file_path": "/src/gen.go", "content": content})
	h.append("s", user("generate the file"),
		history.Message{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockToolCall, ID: "w1", Name: "write", Input: in}}},
		history.Message{Role: history.RoleTool, ToolCallID: "w1", ToolName: "write", Content: []history.Block{{Type: history.BlockText, Text: "File written."}}})
	before := h.context("s")
	for i := range 3 {
		toolRound(h, fmt.Sprintf("r%d", i), "bash", 20)
	}
	a := h.context("s")
	got := a.Messages[1].Content[0].Input
	var fields map[string]string
	if err := json.Unmarshal(got, &fields); err != nil || len(fields) != 2 || fields["file_path"] != "/src/gen.go" {
		t.Fatalf("rendered input %s", got)
	}
	if fields["content"] != contextedit.InputStub(len(content)) {
		t.Fatalf("content sent as %.100q", fields["content"])
	}
	if a.Tokens+5000 > before.Tokens+3*100 {
		t.Fatalf("tokens %d after the pass, %d before the rounds: the input was not cleared from the estimate", a.Tokens, before.Tokens)
	}
	evs := h.events("s", checkpoint.KindContextEdit)
	if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"inputs":[{"id":"w1","fields":["/content"]}]`) {
		t.Fatalf("context_edit events: %d", len(evs))
	}
	want := encodeAll(t, a)
	h.Close()
	h2 := newHarness(t, cfg, dir+"/db")
	if encodeAll(t, h2.context("s")) != want {
		t.Fatal("the context after a restart differs")
	}
}
