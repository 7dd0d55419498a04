package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/internal/fakeprovider"
	"github.com/ctxd/ctxd/wire"
)

// compactionCassette is the corpus's recorded server-side compaction
// (pydantic-ai's test_anthropic_compaction_usage_with_cache): the request's
// context_management, its content length, and the compaction block's
// summary.
type compactionCassette struct {
	contextManagement json.RawMessage
	contentLength     int
	summary           string
}

func readCompactionCassette(t *testing.T) compactionCassette {
	t.Helper()
	var f struct {
		Interactions []struct {
			ID      string `json:"id"`
			Request struct {
				ContentLength int `json:"content_length"`
				Body          struct {
					ContextManagement json.RawMessage `json:"context_management"`
				} `json:"body"`
			} `json:"request"`
			Response struct {
				Body struct {
					Content []struct {
						Type    string `json:"type"`
						Content string `json:"content"`
					} `json:"content"`
				} `json:"body"`
			} `json:"response"`
		} `json:"interactions"`
	}
	if err := json.Unmarshal(corpustest.Read(t, "providers/anthropic-messages-cassettes.json"), &f); err != nil {
		t.Fatal(err)
	}
	for _, in := range f.Interactions {
		if in.ID == "server_side_compaction_compact_20260112" {
			return compactionCassette{in.Request.Body.ContextManagement, in.Request.ContentLength, in.Response.Body.Content[0].Content}
		}
	}
	t.Fatal("no compaction cassette")
	return compactionCassette{}
}

// serverShapeFixture is a proxy whose Anthropic upstream is the strict fake
// provider, with compaction.shape "server" and model claude-sonnet-4-6 at
// the given window (threshold 70 % of it).
func serverShapeFixture(t *testing.T, window uint64, fc fakeprovider.Config) (*fixture, *fakeprovider.Provider) {
	t.Helper()
	fake := fakeprovider.Start(t, fc)
	cfg := testConfig()
	cfg.Compaction.Shape = config.ShapeServer
	cfg.Models["claude-sonnet-4-6"] = config.Model{ContextLimit: window, ThinkingBinding: true, ServerCompaction: true, TokenFactor: 1}
	f := newFixture(t, cfg)
	// Before any request: the fake is the Anthropic upstream.
	u, err := url.Parse(fake.URL())
	if err != nil {
		t.Fatal(err)
	}
	f.p.upstream = u
	return f, fake
}

// cassetteConversation is the recorded request's conversation: 'Remember
// this context: ' + the fox sentence repeated to the recorded size +
// '\n\nNow say hello.', on claude-sonnet-4-6, no tools.
func cassetteConversation(c compactionCassette, stream bool) *conversation {
	const fox = "The quick brown fox jumps over the lazy dog. "
	conv := newConversation()
	conv.model = "claude-sonnet-4-6"
	conv.system = `[{"type":"text","text":"You are a helpful assistant. Be very brief."}]`
	conv.tools = `[]`
	conv.extra = fmt.Sprintf(`"stream":%v`, stream)
	return conv.user("Remember this context: " + strings.Repeat(fox, c.contentLength/len(fox)) + "\n\nNow say hello.")
}

// Shape server on the Anthropic Messages API (docs/decisions.md "Shape
// server"): ctxd adds the
// recorded compact_20260112 edit (the session's threshold as its trigger)
// with the compact-2026-01-12 beta; the strict fake answers, streamed and
// not, with the recorded compaction block first; ctxd passes it to the
// client unchanged and records it as the session's checkpoint (binding
// server), so the estimate drops to what follows the block; the next
// request begins with a user line, then sends the block back and not the
// 225 KB it replaced — and the fake accepts it.
func TestServerShapeAnthropicFromTheCassette(t *testing.T) {
	c := readCompactionCassette(t)
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f, fake := serverShapeFixture(t, 72000, fakeprovider.Config{ServerCompaction: true, CompactionSummary: c.summary, NoThinking: true})
			conv := cassetteConversation(c, stream)
			resp, got := f.post(conv.body(), nil)
			if resp.StatusCode != 200 {
				t.Fatalf("client got %d %s", resp.StatusCode, got)
			}
			id := resp.Header.Get(HeaderSessionID)
			f.settle()
			reqs := fake.Messages(false)
			if len(reqs) != 1 || !reqs[0].Compacted {
				t.Fatalf("%d upstream requests, %d refused", len(reqs), len(fake.Refused()))
			}
			// The edit as recorded, with the session's threshold (70 % of
			// 72,000) as its trigger.
			var sent struct {
				CM json.RawMessage `json:"context_management"`
			}
			_ = json.Unmarshal(reqs[0].Body, &sent)
			want := strings.Replace(string(c.contextManagement), "50000", "50400", 1)
			if compactJSON(t, sent.CM) != compactJSON(t, json.RawMessage(want)) {
				t.Errorf("context_management %s, want the recorded %s with trigger 50400", sent.CM, c.contextManagement)
			}
			if !strings.Contains(reqs[0].Header.Get("Anthropic-Beta"), "compact-2026-01-12") {
				t.Errorf("anthropic-beta %q", reqs[0].Header.Get("Anthropic-Beta"))
			}
			if !strings.Contains(string(got), c.summary[:40]) && !strings.Contains(string(got), jsonString(c.summary)[:40]) {
				t.Errorf("the client did not get the compaction block: %.300s", got)
			}
			// The checkpoint: binding server, the provider's summary.
			cps, err := f.eng.Checkpoints(context.Background(), id)
			if err != nil || len(cps) != 1 || cps[0].Binding != engine.BindingServer || cps[0].Summary != c.summary || cps[0].Shape != config.ShapeServer {
				t.Fatalf("checkpoints %+v %v", cps, err)
			}
			info, _ := f.eng.Session(context.Background(), id)
			if info.Tokens > 1000 || cps[0].TokensBefore < 40000 {
				t.Errorf("tokens %d after the provider's compaction (before %d)", info.Tokens, cps[0].TokensBefore)
			}
			if info.ServerShape == nil || !info.ServerShape.Active {
				t.Errorf("server shape %+v", info.ServerShape)
			}

			// The next request: the client resends everything.
			answer := fmt.Sprintf(`{"role":"assistant","content":[{"type":"compaction","content":%s},{"type":"text","text":%q}]}`, jsonString(c.summary), fake.Config().SideAnswer)
			conv.assistant(answer).user("Now say goodbye.")
			resp, got = f.post(conv.body(), nil)
			if resp.StatusCode != 200 {
				t.Fatalf("second request: %d %s", resp.StatusCode, got)
			}
			f.settle()
			reqs = fake.Messages(false)
			if len(reqs) != 2 || reqs[1].Refused() || reqs[1].Compacted {
				t.Fatalf("%d upstream requests; the last: status %d %s, compacted %v", len(reqs), reqs[len(reqs)-1].Status, reqs[len(reqs)-1].Error, reqs[len(reqs)-1].Compacted)
			}
			out := outgoingMessages(t, reqs[1].Body)
			if len(out) != 3 || out[0]["role"] != "user" || out[1]["role"] != "assistant" || out[2]["role"] != "user" {
				t.Fatalf("second request's messages: %v", out)
			}
			first := out[0]["content"].([]any)[0].(map[string]any)["text"].(string)
			block := out[1]["content"].([]any)[0].(map[string]any)
			if !strings.HasPrefix(first, "[ctxd: the provider compacted") || block["type"] != "compaction" || block["content"] != c.summary {
				t.Errorf("second request: %q, then %v", first, block)
			}
			if len(reqs[1].Body) > 10000 {
				t.Errorf("the second request is %d bytes: the replaced text went again", len(reqs[1].Body))
			}
			t.Logf("first request %d bytes (%d fake tokens, compacted); checkpoint %d → %d tokens; second request %d bytes (%d fake tokens)",
				len(reqs[0].Body), reqs[0].Tokens, cps[0].TokensBefore, cps[0].TokensAfter, len(reqs[1].Body), reqs[1].Tokens)
		})
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Where the provider's compaction is not available the session falls back
// to the summarizer bindings, says why, and sends nothing the upstream
// would refuse: an upstream that refuses the beta (the request goes once
// more without it, and the client sees only the answer), a threshold under
// Anthropic's minimum trigger, a model without server_compaction.
func TestServerShapeFallsBack(t *testing.T) {
	c := readCompactionCassette(t)
	t.Run("upstream refuses", func(t *testing.T) {
		f, fake := serverShapeFixture(t, 72000, fakeprovider.Config{NoThinking: true})
		resp, got := f.post(cassetteConversation(c, true).body(), nil)
		if resp.StatusCode != 200 || !strings.Contains(string(got), fake.Config().SideAnswer) {
			t.Fatalf("client got %d %s", resp.StatusCode, got)
		}
		f.settle()
		reqs := fake.Messages(false)
		if len(reqs) != 2 || !reqs[0].Refused() || reqs[1].Refused() || strings.Contains(string(reqs[1].Body), "context_management") ||
			strings.Contains(reqs[1].Header.Get("Anthropic-Beta"), "compact") {
			t.Fatalf("upstream requests: %d, refused %d", len(reqs), len(fake.Refused()))
		}
		info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
		if info.ServerShape == nil || info.ServerShape.Active || !strings.Contains(info.ServerShape.Why, "refused") {
			t.Fatalf("server shape %+v", info.ServerShape)
		}
		if !strings.Contains(resp.Header.Get(HeaderDiagnostic), "falls back") {
			t.Errorf("diagnostic %q", resp.Header.Get(HeaderDiagnostic))
		}
	})
	t.Run("threshold under the minimum trigger", func(t *testing.T) {
		f, fake := serverShapeFixture(t, 60000, fakeprovider.Config{ServerCompaction: true, NoThinking: true})
		conv := newConversation()
		conv.model = "claude-sonnet-4-6"
		resp, _ := f.post(conv.user("hello").body(), nil)
		f.settle()
		if r := fake.Messages(false); resp.StatusCode != 200 || len(r) != 1 || strings.Contains(string(r[0].Body), "compact_20260112") {
			t.Fatalf("status %d, %d upstream requests", resp.StatusCode, len(r))
		}
		info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
		if info.ServerShape == nil || info.ServerShape.Active || !strings.Contains(info.ServerShape.Why, "minimum compaction trigger") {
			t.Fatalf("server shape %+v", info.ServerShape)
		}
	})
	t.Run("model without server compaction", func(t *testing.T) {
		f, fake := serverShapeFixture(t, 72000, fakeprovider.Config{ServerCompaction: true, NoThinking: true})
		resp, _ := f.post(newConversation().user("hello").body(), nil) // claude-opus-4-8 by default...
		f.settle()
		info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
		sentEdit := strings.Contains(string(fake.Messages(false)[0].Body), "compact_20260112")
		if info.Model == "claude-opus-4-8" && !sentEdit {
			t.Fatalf("claude-opus-4-8 lists server compaction; the edit was not sent")
		}
		conv := newConversation()
		conv.model = "claude-sonnet-4-5"
		resp, _ = f.post(conv.user("hello, again").body(), nil)
		f.settle()
		r := fake.Messages(false)
		if strings.Contains(string(r[len(r)-1].Body), "compact_20260112") {
			t.Fatal("the edit went to a model without server compaction")
		}
		info, _ = f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
		if info.ServerShape == nil || info.ServerShape.Active || !strings.Contains(info.ServerShape.Why, "server_compaction") {
			t.Fatalf("server shape %+v", info.ServerShape)
		}
	})
}

// Shape server on the OpenAI Responses API: ctxd adds the documented
// context_management entry {"type":"compaction","compact_threshold":N}
// (N the session's threshold); the strict fake answers with an opaque
// compaction item first; ctxd records it as the checkpoint (binding
// server) and the next request sends, after the fixed prefix and a user
// line, that item byte for byte — not the 120 KB it replaced.
func TestServerShapeResponses(t *testing.T) {
	fake := fakeprovider.Start(t, fakeprovider.Config{ServerCompaction: true, NoThinking: true})
	cfg := testConfig()
	cfg.Compaction.Shape = config.ShapeServer
	cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 40000, ServerCompaction: true, TokenFactor: 1}
	cfg.Proxy.Upstreams.OpenAI.BaseURL = fake.URL()
	f := newFixture(t, cfg)
	const fox = "The quick brown fox jumps over the lazy dog. "
	long, _ := json.Marshal(strings.Repeat(fox, 120000/len(fox)))
	conv := newCodexConversation().add(`{"type":"message","role":"user","content":[{"type":"input_text","text":` + string(long) + `}]}`)
	body := func() string { return strings.Replace(conv.body(""), `"stream":true`, `"stream":false`, 1) }
	resp, got := f.postOpenAI("/v1/responses", body(), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("client got %d %.300s", resp.StatusCode, got)
	}
	f.settle()
	reqs := fake.Messages(false)
	if len(reqs) != 1 || !reqs[0].Compacted {
		t.Fatalf("%d upstream requests, %d refused", len(reqs), len(fake.Refused()))
	}
	var sent struct {
		CM json.RawMessage `json:"context_management"`
	}
	_ = json.Unmarshal(reqs[0].Body, &sent)
	if string(sent.CM) != `[{"type":"compaction","compact_threshold":28000}]` {
		t.Errorf("context_management %s", sent.CM)
	}
	var answer struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(got, &answer); err != nil || len(answer.Output) < 2 || wire.TypeOf(answer.Output[0]) != "compaction" {
		t.Fatalf("answer: %.400s", got)
	}
	id := resp.Header.Get(HeaderSessionID)
	cps, _ := f.eng.Checkpoints(context.Background(), id)
	if len(cps) != 1 || cps[0].Binding != engine.BindingServer || !strings.Contains(cps[0].Summary, "opaque") {
		t.Fatalf("checkpoints %d", len(cps))
	}
	if info, _ := f.eng.Session(context.Background(), id); info.Tokens > 2000 {
		t.Errorf("tokens %d after the provider's compaction", info.Tokens)
	}

	// The client appends the output items and its tool outputs.
	var outputs []string
	for _, it := range answer.Output {
		conv.add(string(it))
		var call struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		}
		_ = json.Unmarshal(it, &call)
		if call.Type == "function_call" {
			outputs = append(outputs, fmt.Sprintf(`{"type":"function_call_output","call_id":%q,"output":"ok"}`, call.CallID))
		}
	}
	if len(outputs) == 0 {
		outputs = append(outputs, `{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}`)
	}
	conv.add(outputs...)
	resp, got = f.postOpenAI("/v1/responses", body(), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("second request: %d %.300s", resp.StatusCode, got)
	}
	f.settle()
	reqs = fake.Messages(false)
	if len(reqs) != 2 || reqs[1].Refused() || reqs[1].Compacted || len(reqs[1].Body) > 8000 {
		t.Fatalf("%d upstream requests; the second: status %d %s, compacted %v, %d bytes", len(reqs), reqs[1].Status, reqs[1].Error, reqs[1].Compacted, len(reqs[1].Body))
	}
	var in struct {
		Input []json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(reqs[1].Body, &in)
	if len(in.Input) < 5 || string(in.Input[0]) != codexDeveloper || wire.TypeOf(in.Input[2]) != "message" || !bytes.Equal(in.Input[3], answer.Output[0]) {
		t.Fatalf("second request's input: %d items", len(in.Input))
	}
}

// Chat Completions has no server compaction: a Chat session with shape
// server falls back to the summarizer, says so, and sends no
// context_management.
func TestServerShapeChatFallsBack(t *testing.T) {
	fake := fakeprovider.Start(t, fakeprovider.Config{ServerCompaction: true, NoThinking: true})
	cfg := testConfig()
	cfg.Compaction.Shape = config.ShapeServer
	cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 100000, ServerCompaction: true, TokenFactor: 1}
	cfg.Proxy.Upstreams.OpenAI.BaseURL = fake.URL()
	f := newFixture(t, cfg)
	resp, got := f.postOpenAI("/v1/chat/completions", `{"model":"gpt-5.2-codex","messages":[{"role":"user","content":"hello"}]}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	f.settle()
	if r := fake.Messages(false); len(r) != 1 || bytes.Contains(r[0].Body, []byte("context_management")) {
		t.Fatalf("%d upstream requests", len(r))
	}
	info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
	if info.ServerShape == nil || info.ServerShape.Active || !strings.Contains(info.ServerShape.Why, "Chat Completions API has no server-side compaction") {
		t.Fatalf("server shape %+v", info.ServerShape)
	}
}

// An OpenAI-compatible upstream that does not know context_management
// (the fake's "Unknown parameter" 400): the request goes once more without
// it and the session falls back to the summarizer.
func TestServerShapeResponsesUpstreamRefuses(t *testing.T) {
	fake := fakeprovider.Start(t, fakeprovider.Config{NoThinking: true})
	cfg := testConfig()
	cfg.Compaction.Shape = config.ShapeServer
	cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 100000, ServerCompaction: true, TokenFactor: 1}
	cfg.Proxy.Upstreams.OpenAI.BaseURL = fake.URL()
	f := newFixture(t, cfg)
	resp, got := f.postOpenAI("/v1/responses", newCodexConversation().body(""), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %.300s", resp.StatusCode, got)
	}
	f.settle()
	r := fake.Messages(false)
	if len(r) != 2 || !r[0].Refused() || r[1].Refused() || bytes.Contains(r[1].Body, []byte("context_management")) {
		t.Fatalf("%d upstream requests, %d refused", len(r), len(fake.Refused()))
	}
	info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
	if info.ServerShape == nil || info.ServerShape.Active || !strings.Contains(info.ServerShape.Why, "Unknown parameter") {
		t.Fatalf("server shape %+v", info.ServerShape)
	}
}

// Upstreams lists both upstreams with their endpoints; a base URL's
// userinfo (which the configuration refuses, but Options may carry) is
// never shown.
func TestUpstreamsShown(t *testing.T) {
	f := newFixture(t, testConfig())
	cfg := f.cfg.Proxy
	cfg.Upstreams.OpenAI.BaseURL = "http://vllm-user:s3cret-pass@127.0.0.1:9"
	p, err := New(Options{Engine: f.eng, Secret: testSecret, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ups := p.Upstreams()
	if len(ups) != 2 || ups[0].Name != "anthropic" || ups[0].BaseURL != f.up.srv.URL || ups[1].Name != "openai" || ups[1].BaseURL != "http://127.0.0.1:9" ||
		strings.Join(ups[1].Endpoints, " ") != "/v1/responses /v1/chat/completions" || p.OpenAIUpstream() != "http://127.0.0.1:9" {
		t.Fatalf("upstreams %+v", ups)
	}
}
