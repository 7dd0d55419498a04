package wire_test

import (
	"testing"

	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/wire/openai/chat"
	"github.com/ctxd/ctxd/wire/openai/responses"
)

// The cache lifetime a request asks for, which idle compaction times
// itself to (docs/design.md §5.1): an Anthropic request's "ttl": "1h"
// markers give an hour, an OpenAI request's prompt_cache_retention "24h"
// a day, anything else the provider's default (0).
func TestCacheLifetime(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    wire.Dialect
		body string
		want uint64
	}{
		{"anthropic default", anthropic.Dialect{}, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`, 0},
		{"anthropic 1h markers", anthropic.Dialect{}, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`, 3600},
		{"openai default", responses.Dialect{}, `{"model":"m","input":[]}`, 0},
		{"openai 24h retention", responses.Dialect{}, `{"model":"m","input":[],"prompt_cache_retention":"24h"}`, 86400},
		{"openai in-memory retention", responses.Dialect{}, `{"model":"m","input":[],"prompt_cache_retention":"in-memory"}`, 0},
		{"chat 24h retention", chat.Dialect{}, `{"model":"m","messages":[],"prompt_cache_retention":"24h"}`, 86400},
		{"openai retention of another type", chat.Dialect{}, `{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_retention":24}`, 0},
	} {
		v, err := tc.d.CacheView([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if v.Lifetime != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, v.Lifetime, tc.want)
		}
		if tc.name == "openai retention of another type" && len(v.Elements) != 2 {
			t.Errorf("%s: %d elements, want 2 (the tools and the message)", tc.name, len(v.Elements))
		}
	}
}
