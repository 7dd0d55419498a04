package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
	"github.com/ctxd/ctxd/trigger"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// An assistant message while an earlier call is open is refused, naming the
// call, and nothing is stored (docs/decisions.md "An assistant message while a
// tool call is open"): the Anthropic context can
// never put c2's result after a later assistant message.
func TestAssistantWhileACallIsOpenIsRefused(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	h.create("s", 20000)
	h.append("s", user("go"), calls("c1", "c2"), result("c1", "one"))
	before, _ := h.e.Session(context.Background(), "s")
	_, err := h.e.Append(context.Background(), "s", []history.Message{assistant("let me think"), result("c2", "two")})
	var fe *FieldError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "messages[0].role" || !strings.Contains(err.Error(), `"c2"`) {
		t.Fatalf("err = %v, want ErrInvalid on messages[0].role naming c2", err)
	}
	if after, _ := h.e.Session(context.Background(), "s"); after.LastSeq != before.LastSeq {
		t.Fatal("a refused append stored something")
	}
	h.append("s", result("c2", "two"), assistant("both done"))
	checkValid(t, h.context("s").Messages)
}

// cassette is one interaction of the corpus's recorded Anthropic
// request/response pairs (providers/anthropic-messages-cassettes.json).
type cassette struct {
	ID      string `json:"id"`
	Request struct {
		ContentLength int `json:"content_length"`
		Body          struct {
			Model  string          `json:"model"`
			System json.RawMessage `json:"system"`
		} `json:"body"`
	} `json:"request"`
	Response struct {
		Body struct {
			Content json.RawMessage `json:"content"`
			Usage   struct {
				Iterations []struct {
					Type         string `json:"type"`
					InputTokens  uint64 `json:"input_tokens"`
					OutputTokens uint64 `json:"output_tokens"`
				} `json:"iterations"`
			} `json:"usage"`
		} `json:"body"`
	} `json:"response"`
}

func readCassette(t *testing.T, id string) cassette {
	t.Helper()
	var file struct {
		Interactions []cassette `json:"interactions"`
	}
	if err := json.Unmarshal(corpustest.Read(t, "providers/anthropic-messages-cassettes.json"), &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range file.Interactions {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no interaction %q in the cassettes", id)
	return cassette{}
}

// An Anthropic assistant message starting with a server-side compaction
// block (docs/decisions.md "Provider compaction blocks and tool
// definitions in the estimate"): the message model carries the block through
// import, storage and the Anthropic rendering, and the estimate counts only
// what follows it — near what Anthropic billed for the compacted context,
// not the 50,000 tokens of the text it replaced.
func TestProviderCompactionBlockFromTheCassette(t *testing.T) {
	c := readCassette(t, "server_side_compaction_compact_20260112")
	// The request's text, as the cassette describes it: 'Remember this
	// context: ' + the fox sentence repeated + '\n\nNow say hello.', the
	// body ~225 KB.
	const fox = "The quick brown fox jumps over the lazy dog. "
	long := "Remember this context: " + strings.Repeat(fox, c.Request.ContentLength/len(fox)) + "\n\nNow say hello."
	arr, _ := json.Marshal([]map[string]any{
		{"role": "user", "content": long},
		{"role": "assistant", "content": c.Response.Body.Content},
	})
	tr, err := transcript.ImportFormat(bytes.NewReader(arr), transcript.FormatAnthropicMessages, transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reply := tr.Messages[len(tr.Messages)-1]
	if reply.Content[0].Type != history.BlockCompaction || !strings.HasPrefix(reply.Content[0].Text, "The user provided a very long context") {
		t.Fatalf("the compaction block was not kept: %+v", reply.Content)
	}
	var billed uint64 // the context after the compaction: the message iteration
	for _, it := range c.Response.Body.Usage.Iterations {
		if it.Type == "message" {
			billed = it.InputTokens + it.OutputTokens
		}
	}
	var system []struct{ Text string }
	_ = json.Unmarshal(c.Request.Body.System, &system)

	h := newHarness(t, testConfig(), "")
	if _, err := h.e.CreateSession(context.Background(), CreateParams{ID: "s", Model: c.Request.Body.Model, System: system[0].Text}); err != nil {
		t.Fatal(err)
	}
	h.append("s", tr.Messages[0])
	before, _ := h.e.Session(context.Background(), "s")
	h.append("s", tr.Messages[1:]...)
	after, _ := h.e.Session(context.Background(), "s")
	t.Logf("estimate before the compaction block %d tokens, after %d; billed %d", before.Tokens, after.Tokens, billed)
	if before.Tokens < 40000 {
		t.Fatalf("the long request estimates %d tokens", before.Tokens)
	}
	if after.Tokens > 2*billed || after.Tokens < billed/2 {
		t.Fatalf("estimate %d tokens after the compaction block; Anthropic billed %d", after.Tokens, billed)
	}
	// The block is sent back as Anthropic wrote it, first in its message.
	a := h.context("s")
	body, err := json.Marshal(anthropic.Render(a.System, a.Tools, a.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`{"role":"assistant","content":[{"type":"compaction","content":"The user provided`)) {
		t.Fatalf("rendering: %.300s", body[len(body)-600:])
	}
	var back anthropic.Request
	if err := json.Unmarshal(body, &back); err != nil || back.Messages[1].Content[0].Compaction != reply.Content[0].Text {
		t.Fatalf("round trip: %v", err)
	}
}

// Tool definitions count in every estimate, with the
// framing the provider adds around them. The recorded tool-chain request of
// pydantic-ai's test_anthropic_tool_output cassette (claude-sonnet-4-5, two
// tools, one prompt; the cassettes of the corpus have no tools) was billed
// 711 input tokens; the definitions' text alone estimates about 120.
func TestToolDefinitionsCountInTheEstimate(t *testing.T) {
	tools := []history.ToolDef{
		{Name: "get_user_country", InputSchema: json.RawMessage(`{"additionalProperties":false,"properties":{},"type":"object"}`)},
		{Name: "final_result", Description: "The final response which ends this conversation",
			InputSchema: json.RawMessage(`{"properties":{"city":{"type":"string"},"country":{"type":"string"}},"required":["city","country"],"type":"object"}`)},
	}
	const billed = 711
	h := newHarness(t, testConfig(), "")
	for _, id := range []string{"with", "without"} {
		p := CreateParams{ID: id, Model: "claude-sonnet-4-5"}
		if id == "with" {
			p.Tools = tools
		}
		if _, err := h.e.CreateSession(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		h.append(id, user("What is the largest city in the user country?"))
	}
	with, _ := h.e.Session(context.Background(), "with")
	without, _ := h.e.Session(context.Background(), "without")
	t.Logf("estimate with tools %d tokens, without %d; billed %d", with.Tokens, without.Tokens, billed)
	if with.Tokens < billed*6/10 || with.Tokens > billed*13/10 {
		t.Fatalf("estimate %d tokens with the tools; billed %d", with.Tokens, billed)
	}
	// After a checkpoint, with no usage, the tools still count.
	h.append("with", assistant("Mexico City"), user("thanks"))
	if _, err := h.e.Compact(context.Background(), "with", trigger.Manual, true); err != nil {
		t.Fatal(err)
	}
	info, _ := h.e.Session(context.Background(), "with")
	if info.Tokens < history.ToolsPreambleTokens {
		t.Fatalf("after a checkpoint the estimate is %d tokens", info.Tokens)
	}
}

// ruleMetrics records provider-rule violations.
type ruleMetrics struct {
	noMetrics
	rules []string
}

func (m *ruleMetrics) ProviderRuleViolation(rule string) { m.rules = append(m.rules, rule) }

// A context that breaks a provider rule is never returned (docs/design.md §4a):
// Context answers ErrProviderRule and the violation is counted; Unchecked
// returns it with its violations (replay). A history that opens with an
// assistant message is one Anthropic refuses ("first message must use the
// "user" role").
func TestAContextBreakingAProviderRuleIsWithheld(t *testing.T) {
	h := newHarness(t, testConfig(), "")
	rec := &ruleMetrics{}
	h.e.metrics = rec
	h.create("s", 20000)
	h.append("s", assistant("Hello, how can I help?"), user("fix it"))
	_, err := h.e.Context(context.Background(), "s", ContextOptions{NoPreSend: true})
	if !errors.Is(err, ErrProviderRule) || !strings.Contains(err.Error(), history.RuleFirstNotUser) {
		t.Fatalf("err = %v, want ErrProviderRule naming %s", err, history.RuleFirstNotUser)
	}
	if len(rec.rules) != 1 || rec.rules[0] != history.RuleFirstNotUser {
		t.Fatalf("counted %v", rec.rules)
	}
	a, err := h.e.Context(context.Background(), "s", ContextOptions{NoPreSend: true, Unchecked: true})
	if err != nil || len(a.Violations) != 1 || len(a.Messages) != 2 {
		t.Fatalf("unchecked: %v, %+v", err, a)
	}
	// Pinned context before it makes the same history valid.
	pinned := []history.Block{{Type: history.BlockText, Text: "project notes"}}
	if _, err := h.e.UpdateSession(context.Background(), "s", Patch{Pinned: &pinned}); err != nil {
		t.Fatal(err)
	}
	checkValid(t, h.context("s").Messages)
}
