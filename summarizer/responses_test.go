package summarizer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// A binding with provider openai-responses summarizes through the Responses
// API: the strict fake provider accepts the request —
// instructions, the history as input items (function calls paired with
// their outputs), function tools with tool_choice "none", store false, the
// key as a bearer token — and its answer's text is the summary. A proxied
// session's client credential replaces the key, and its own instructions
// and tools go byte for byte.
func TestResponsesProvider(t *testing.T) {
	fake := fakeprovider.Start(t, fakeprovider.Config{APIKey: "sk-proj-client", NoThinking: true})
	s := newTestSummarizer()
	req := sampleRequest()
	b := config.Binding{Name: "codex-own", Provider: ProviderOpenAIResponses, Model: "gpt-5.2-codex", BaseURL: fake.URL(),
		Credential: &config.Credential{Authorization: "Bearer sk-proj-client"}}
	res, err := s.Summarize(context.Background(), []config.Binding{b}, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Binding != "codex-own" || res.Provider != ProviderOpenAIResponses || strings.TrimSpace(res.Summary) == "" || res.Usage == nil {
		t.Fatalf("result %+v", res)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/responses" || reqs[0].Refused() || reqs[0].Step != fakeprovider.StepSummary {
		t.Fatalf("%d upstream requests, the first %s status %d %s step %q", len(reqs), reqs[0].Path, reqs[0].Status, reqs[0].Error, reqs[0].Step)
	}
	var body struct {
		Model        string            `json:"model"`
		Instructions string            `json:"instructions"`
		Input        []json.RawMessage `json:"input"`
		Tools        []map[string]any  `json:"tools"`
		ToolChoice   string            `json:"tool_choice"`
		Store        *bool             `json:"store"`
	}
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	calls := strings.Count(string(reqs[0].Body), `"type":"function_call"`)
	outputs := strings.Count(string(reqs[0].Body), `"type":"function_call_output"`)
	if body.Model != "gpt-5.2-codex" || body.Instructions != req.System || len(body.Tools) != 2 || body.Tools[0]["type"] != "function" ||
		body.ToolChoice != "none" || body.Store == nil || *body.Store || calls != 3 || outputs != 3 {
		t.Fatalf("request: model %q, instructions %q, %d tools, tool_choice %q, store %v, %d calls, %d outputs",
			body.Model, body.Instructions, len(body.Tools), body.ToolChoice, body.Store, calls, outputs)
	}

	// The client's own instructions and tools, byte for byte.
	b.Credential.System = []byte(`"You are Codex."`)
	b.Credential.Tools = []byte(`[{"type":"function","name":"read","parameters":{"type":"object"}},{"type":"function","name":"bash","parameters":{"type":"object"}}]`)
	if _, err := s.Summarize(context.Background(), []config.Binding{b}, req, nil); err != nil {
		t.Fatal(err)
	}
	last := fake.Requests()[1].Body
	if !strings.Contains(string(last), `"instructions":"You are Codex."`) || !strings.Contains(string(last), `"tools":`+string(b.Credential.Tools)) {
		t.Fatalf("the client's prefix was not sent as it came: %.400s", last)
	}

	// A wrong key: the fake's 401, a permanent failure of the binding.
	b.Credential.Authorization = "Bearer sk-wrong"
	if _, err := s.Summarize(context.Background(), []config.Binding{b}, req, nil); err == nil {
		t.Fatal("a refused key produced a summary")
	}
}

// The answer checks apply to Responses answers: a cut answer (status
// incomplete, max_output_tokens), a tool call, a refusal.
func TestDecodeResponsesAnswerChecks(t *testing.T) {
	for _, c := range []struct {
		body string
		want func(answer) bool
	}{
		{`{"status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"the summary"}]}],"usage":{"input_tokens":10,"output_tokens":3}}`,
			func(a answer) bool { return a.text == "the summary" && !a.truncated && a.usage != nil }},
		{`{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","content":[{"type":"output_text","text":"the sum"}]}]}`,
			func(a answer) bool { return a.truncated }},
		{`{"status":"completed","output":[{"type":"function_call","call_id":"c","name":"read","arguments":"{}"}]}`,
			func(a answer) bool { return a.toolCall }},
		{`{"status":"completed","output":[{"type":"message","content":[{"type":"refusal","refusal":"no"}]}]}`,
			func(a answer) bool { return a.refused }},
	} {
		a, err := decodeResponses([]byte(c.body))
		if err != nil || !c.want(a) {
			t.Errorf("%s: %+v %v", c.body, a, err)
		}
	}
	if _, err := decodeResponses([]byte(`not json`)); err == nil {
		t.Error("a malformed answer decoded")
	}
}
