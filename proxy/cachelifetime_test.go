package proxy

import (
	"testing"

	"github.com/ctxd/ctxd/ledger"
)

// The cache lifetime a request asked for, which idle compaction times
// itself to (docs/design.md §5.1).
func TestCacheLifetime(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    dialect
		body string
		long bool
		want uint64
	}{
		{"anthropic default", dialectAnthropic, `{"model":"m","messages":[]}`, false, 0},
		{"anthropic 1h markers", dialectAnthropic, `{"model":"m","messages":[]}`, true, 3600},
		{"openai default", dialectResponses, `{"model":"m","input":[]}`, false, 0},
		{"openai 24h retention", dialectResponses, `{"model":"m","input":[],"prompt_cache_retention":"24h"}`, false, 86400},
		{"openai in-memory retention", dialectResponses, `{"model":"m","input":[],"prompt_cache_retention":"in-memory"}`, false, 0},
	} {
		if got := cacheLifetime(tc.d, []byte(tc.body), ledger.Request{LongTTL: tc.long}); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
