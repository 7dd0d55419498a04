package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
)

// Repeated compaction with an LLM binding (docs/design.md §5.3): the
// summarizer request after the first compaction is the previous summary
// (the first request carried before it) plus what followed, and ends with
// the prompt that asks to carry the earlier summary's facts forward.
func TestLLMSummarizerGetsEarlierSummary(t *testing.T) {
	first := "## Goal\nShip the parser.\n\n## Decisions\n- Parse stays exported because the CLI calls it.\n\n## Errors and fixes\n- parse_test.go: undefined: Token — not resolved yet.\n\n## Next steps\n- write TestParse"
	second := "## Goal\nShip the parser, then the lexer.\n\n## Decisions\n- Parse stays exported because the CLI calls it.\n\n## Next steps\n- write TestParse, then TestLex"
	f := newFakeAnthropic(t, okSummary(first), okSummary(second))
	cfg := recallConfig(t.TempDir())
	cfg.Summarizer.Bindings = []config.Binding{f.binding()}
	h := newHarness(t, cfg, "")
	h.create("s", 20000)
	h.append("s", user("ship the parser"), assistant(words(6000)), user("again"), assistant(words(6000)), user("go on"), assistant("ok"))
	res, err := h.e.Compact(context.Background(), "s", trigger.Manual, true)
	if err != nil {
		t.Fatal(err)
	}
	if cp := h.fullCheckpoint("s", res.Checkpoint); !strings.Contains(cp.Summary, "Parse stays exported") {
		t.Fatalf("the first summary is not the binding's (%s): %.300q; %d requests, refused %v", cp.Binding, cp.Summary, f.count(), f.refused)
	}
	h.append("s", user("now the lexer"), assistant(words(6000)), user("more of it"), assistant(words(6000)), user("finish"), assistant("lexer done"))
	if _, err := h.e.Compact(context.Background(), "s", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	body := f.requests[len(f.requests)-1]
	n := len(f.requests)
	f.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d summarizer requests, want 2", n)
	}
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range req.Messages {
		var b strings.Builder
		for _, c := range m.Content {
			b.WriteString(c.Text)
		}
		texts = append(texts, b.String())
	}
	at := func(s string) int {
		for i, t := range texts {
			if strings.Contains(t, s) {
				return i
			}
		}
		return -1
	}
	firstReq, summary, after := at("ship the parser"), at("Parse stays exported because the CLI calls it."), at("now the lexer")
	if firstReq < 0 || summary < 0 || after < 0 || !(firstReq <= summary && summary < after) {
		t.Fatalf("request messages: first request at %d, earlier summary at %d, what followed at %d; want them in that order", firstReq, summary, after)
	}
	if at("lexer done") < 0 {
		t.Error("the latest messages are not in the request")
	}
	if last := texts[len(texts)-1]; last != summarizer.BuiltinPrompt {
		t.Errorf("the request does not end with the built-in prompt: %q", last)
	}
}
