package overflow

import (
	"testing"

	"github.com/ctxd/ctxd/internal/corpustest"
)

// TestIsContextLengthCorpus classifies every real error body of the corpus,
// every provider's: exactly the context-overflow ones are context-length
// refusals.
func TestIsContextLengthCorpus(t *testing.T) {
	cases := corpustest.ContextLengthCases(t, func(string) bool { return true }, 10)
	corpustest.CheckContextLength(t, cases, IsContextLength)
}

// TestIsContextLengthRules: the status rules first (no answer, 408 and 429
// never, 413 always), then the wordings of each API and compatible server.
func TestIsContextLengthRules(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"no answer", 0, `prompt is too long`, false},
		{"429 mentions prompt length", 429, `{"error":{"message":"Please reduce the prompt length; maximum context length"}}`, false},
		{"408", 408, `context window exceeded`, false},
		{"413 html", 413, `<html>Request Entity Too Large</html>`, true},
		{"anthropic", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 200251 tokens > 200000 maximum"}}`, true},
		{"anthropic max_tokens", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 189136 + 20000 > 204648"}}`, true},
		{"openai code", 400, `{"error":{"message":"too many","type":"invalid_request_error","code":"context_length_exceeded"}}`, true},
		{"openai responses", 400, `{"error":{"message":"Your input exceeds the context window of this model."}}`, true},
		{"vllm", 400, `{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens","type":"BadRequestError","code":400}`, true},
		{"llama.cpp", 400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`, true},
		{"compatible wording", 400, `{"error":{"message":"Requested tokens exceed the model's context length"}}`, true},
		{"bedrock", 400, `The model returned the following errors: Input is too long for requested model.`, true},
		{"ollama", 400, `{"error":"input length exceeds the context length"}`, true},
		{"500 wrapping context length", 500, `{"error":{"message":"prompt is too long: 1 tokens > 0 maximum"}}`, true},
		{"history error", 400, `{"error":{"message":"Invalid parameter: messages with role 'tool' must be a response","type":"invalid_request_error"}}`, false},
		{"overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false},
		{"auth", 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, false},
	} {
		if got := IsContextLength(c.status, []byte(c.body)); got != c.want {
			t.Errorf("%s: IsContextLength(%d, %s) = %v, want %v", c.name, c.status, c.body, got, c.want)
		}
	}
}
