package history

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// TestUsageBeyondTheBoundIsRefused: a count
// near 2^64 made the post-check's sum wrap; each count above
// MaxUsageTokens is refused naming its field, the bound itself accepted.
func TestUsageBeyondTheBoundIsRefused(t *testing.T) {
	for _, field := range []string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"} {
		for _, n := range []uint64{MaxUsageTokens + 1, math.MaxUint64} {
			u := Usage{}
			switch field {
			case "input_tokens":
				u.InputTokens = n
			case "cache_creation_input_tokens":
				u.CacheCreationInputTokens = n
			case "cache_read_input_tokens":
				u.CacheReadInputTokens = n
			case "output_tokens":
				u.OutputTokens = n
			}
			m := text(RoleAssistant, "ok")
			m.Usage = &u
			err := ValidateBatch(nil, []Message{text(RoleUser, "hi"), m})
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("%s = %d: got %v, want a ValidationError", field, n, err)
			}
			if ve.Index != 1 || ve.Field != "usage."+field || !strings.Contains(ve.Message, "at most 1000000000") {
				t.Errorf("%s = %d: got index %d field %q message %q", field, n, ve.Index, ve.Field, ve.Message)
			}
		}
	}
	m := text(RoleAssistant, "ok")
	m.Usage = &Usage{InputTokens: MaxUsageTokens, CacheCreationInputTokens: MaxUsageTokens, CacheReadInputTokens: MaxUsageTokens, OutputTokens: MaxUsageTokens}
	if err := ValidateBatch(nil, []Message{text(RoleUser, "hi"), m}); err != nil {
		t.Fatalf("usage at the bound refused: %v", err)
	}
	if got := m.Usage.TotalTokens(); got != 4*MaxUsageTokens {
		t.Errorf("TotalTokens at the bound = %d, want %d", got, 4*MaxUsageTokens)
	}
}

// TestUsageSumsSaturate: usage that was not validated (read from a
// provider's answer) never wraps to a small number.
func TestUsageSumsSaturate(t *testing.T) {
	u := Usage{InputTokens: math.MaxUint64, OutputTokens: math.MaxUint64, CacheReadInputTokens: 5}
	if got := u.ContextTokens(); got != math.MaxUint64 {
		t.Errorf("ContextTokens = %d, want 2^64-1", got)
	}
	if got := u.TotalTokens(); got != math.MaxUint64 {
		t.Errorf("TotalTokens = %d, want 2^64-1", got)
	}
	if got := (Usage{InputTokens: 3, CacheCreationInputTokens: 812, CacheReadInputTokens: 14200, OutputTokens: 95}).TotalTokens(); got != 15110 {
		t.Errorf("TotalTokens = %d, want 15110", got)
	}
}
