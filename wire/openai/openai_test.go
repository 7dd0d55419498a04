package openai

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/corpustest"
)

// TestIsContextLengthCorpus classifies every real error body of the corpus
// of OpenAI and compatible servers: exactly the context-overflow ones.
func TestIsContextLengthCorpus(t *testing.T) {
	cases := corpustest.ContextLengthCases(t, func(p string) bool { return strings.HasPrefix(p, "openai") }, 4)
	cases = append(cases,
		corpustest.ContextLengthCase{Name: "llama.cpp", Status: 400, Want: true,
			Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`},
		corpustest.ContextLengthCase{Name: "vLLM", Status: 400, Want: true,
			Body: `{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens","type":"BadRequestError","code":400}`},
		corpustest.ContextLengthCase{Name: "history error", Status: 400, Want: false,
			Body: `{"error":{"message":"Invalid parameter: messages with role 'tool' must be a response","type":"invalid_request_error"}}`},
	)
	corpustest.CheckContextLength(t, cases, IsContextLength)
}
