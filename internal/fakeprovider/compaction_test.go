package fakeprovider

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The fake's server-side compaction (ctxd's shape server): over the edit's
// trigger the answer begins with a compaction block holding the configured
// summary and reports the compacted input; a request that sends the block
// back is billed from it on; the edit without its beta, a trigger under the
// minimum, and the beta on a fake not configured for it are refused as the
// API refuses them.
func TestServerCompaction(t *testing.T) {
	const summary = "The user asked for a greeting after a long context."
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 6000) // ~270 KB
	body := func(trigger int, msgs string) string {
		return fmt.Sprintf(`{"model":"claude-sonnet-4-6","max_tokens":1024,"context_management":{"edits":[{"type":"compact_20260112","trigger":{"type":"input_tokens","value":%d}}]},"messages":[%s]}`, trigger, msgs)
	}
	first := fmt.Sprintf(`{"role":"user","content":%q}`, long+"Now say hello.")
	beta := map[string]string{"anthropic-beta": "other-2025-01-01," + CompactBeta}

	p := Start(t, Config{ServerCompaction: true, CompactionSummary: summary})
	status, out := post(t, p, "/v1/messages", body(50000, first), beta)
	var got struct {
		Content []map[string]any `json:"content"`
		Usage   usage            `json:"usage"`
	}
	if err := json.Unmarshal(out, &got); status != 200 || err != nil || len(got.Content) < 2 {
		t.Fatalf("status %d: %.300s", status, out)
	}
	if got.Content[0]["type"] != "compaction" || got.Content[0]["content"] != summary || got.Usage.InputTokens > 100 {
		t.Fatalf("answer %v, usage %+v", got.Content[0], got.Usage)
	}
	reqs := p.Requests()
	if !reqs[0].Compacted || reqs[0].Tokens < 60000 {
		t.Fatalf("first request: compacted %v, %d tokens", reqs[0].Compacted, reqs[0].Tokens)
	}
	// Sent back: billed from the block on, so far under the trigger.
	back := first + `,{"role":"assistant","content":[{"type":"compaction","content":` + fmt.Sprintf("%q", summary) + `},{"type":"text","text":"Hello!"}]},{"role":"user","content":"Now say goodbye."}`
	if status, out := post(t, p, "/v1/messages", body(50000, back), beta); status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	reqs = p.Requests()
	if r := reqs[1]; r.Compacted || r.Tokens > 200 {
		t.Fatalf("second request: compacted %v, %d tokens", r.Compacted, r.Tokens)
	}
	// Streamed, the block starts with content null and its summary comes
	// in one compaction_delta.
	stream := strings.Replace(body(50000, first), `"max_tokens":1024,`, `"max_tokens":1024,"stream":true,`, 1)
	if status, out := post(t, p, "/v1/messages", stream, beta); status != 200 ||
		!strings.Contains(string(out), `"content_block":{"content":null,"type":"compaction"}`) ||
		!strings.Contains(string(out), `"delta":{"content":"`+summary+`","type":"compaction_delta"}`) {
		t.Fatalf("stream: %d %.600s", status, out)
	}

	for _, c := range []struct {
		name    string
		p       *Provider
		body    string
		hdr     map[string]string
		message string
	}{
		{"no beta", p, body(50000, first), nil, "requires the beta header 'compact-2026-01-12'"},
		{"trigger under the minimum", p, body(40000, first), beta, "greater than or equal to 50000"},
		{"not configured", Start(t, Config{}), body(50000, first), beta, "Unexpected value(s) `compact-2026-01-12`"},
	} {
		status, out := post(t, c.p, "/v1/messages", c.body, c.hdr)
		if status != 400 || !strings.Contains(string(out), c.message) {
			t.Errorf("%s: %d %s", c.name, status, out)
		}
	}
}
