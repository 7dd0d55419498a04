package openai

import (
	"testing"

	"github.com/ctxd/ctxd/internal/corpustest"
)

// TestContextLengthFiguresCorpus reads the provider's count and window from
// every real OpenAI context-length body of the corpus; the Responses API's
// states neither.
func TestContextLengthFiguresCorpus(t *testing.T) {
	want := map[string][2]uint64{
		"openai_chat_400_context_length_exceeded_pretty":          {4363, 4097},
		"openai_chat_400_context_length_exceeded_compact":         {4294, 4097},
		"openai_chat_400_context_length_exceeded_with_completion": {3120, 4097},
		"openai_responses_context_length_exceeded":                {0, 0},
	}
	for id, w := range want {
		_, body := corpustest.ErrorBodyOf(t, id)
		c, l := ContextLengthFigures([]byte(body))
		if c != w[0] || l != w[1] {
			t.Errorf("%s: count %d, limit %d; want %d, %d", id, c, l, w[0], w[1])
		}
	}
}
