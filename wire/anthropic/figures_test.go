package anthropic

import (
	"testing"

	"github.com/ctxd/ctxd/internal/corpustest"
)

// TestContextLengthFiguresCorpus reads the provider's count and window from
// every real Anthropic context-length body of the corpus that states them.
func TestContextLengthFiguresCorpus(t *testing.T) {
	want := map[string][2]uint64{
		"anthropic_400_prompt_too_long_with_request_id_1":    {200251, 200000},
		"anthropic_400_prompt_too_long_with_request_id_2":    {219898, 200000},
		"anthropic_400_prompt_too_long_no_request_id":        {210266, 200000},
		"anthropic_400_prompt_too_long_roo":                  {208732, 200000},
		"anthropic_400_input_plus_max_tokens_exceed_context": {189136, 184648},
		"openrouter_413_wrapped_prompt_too_long":             {0, 0},
	}
	for id, w := range want {
		_, body := corpustest.ErrorBodyOf(t, id)
		c, l := ContextLengthFigures([]byte(body))
		if c != w[0] || l != w[1] {
			t.Errorf("%s: count %d, limit %d; want %d, %d", id, c, l, w[0], w[1])
		}
	}
	if c, l := ContextLengthFigures([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)); c != 0 || l != 0 {
		t.Errorf("an overload gave %d, %d", c, l)
	}
}
