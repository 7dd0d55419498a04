package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// One LLM binding that refuses 60 KB and 90 KB of plain text: POST compact
// {"reason":"overflow"} answered 502 (every binding failed, the pruned
// retry only trims tool results); with the default fallback it succeeds
// through the extractive fallback and says so.
func TestOverflowCompactionFallsBackToExtractive(t *testing.T) {
	status, body := corpustest.ErrorBodyOf(t, "anthropic_400_prompt_too_long_no_request_id") // Anthropic's recorded context-length refusal
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(provider.Close)
	t.Setenv("CTXD_TEST_KEY", "test-key")
	for _, fallback := range []string{config.FallbackNone, config.FallbackExtractive} {
		t.Run(fallback, func(t *testing.T) {
			f := newFixture(t, nil)
			cfg := f.eng.Config()
			cfg.Summarizer.Bindings = []config.Binding{{Name: "llm", Provider: "anthropic", Model: "claude-test", BaseURL: provider.URL, APIKeyEnv: "CTXD_TEST_KEY"}}
			cfg.Compaction.Fallback = fallback
			f.eng.SetConfig(cfg)
			f.create(t, "s1")
			ctx := context.Background()
			msgs := []api.Message{
				text(api.RoleUser, "explain: "+strings.Repeat("log line with some text\n", 60*1024/24)),
				text(api.RoleAssistant, strings.Repeat("an explanation of a line\n", 90*1024/25)),
			}
			if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: msgs}); err != nil {
				t.Fatal(err)
			}
			code, apiErr, raw, _ := f.do(t, http.MethodPost, "/v1/sessions/s1/compact", `{"reason":"overflow","wait":true}`, nil)
			if fallback == config.FallbackNone {
				if code != http.StatusBadGateway {
					t.Fatalf("status %d (%v), want 502 with fallback = none", code, apiErr)
				}
				return
			}
			var res api.CompactResponse
			if code != http.StatusOK || json.Unmarshal(raw, &res) != nil || res.Status != api.CompactDone {
				t.Fatalf("status %d: %s", code, raw)
			}
			if cp := res.Checkpoint; cp == nil || !cp.Fallback || cp.Binding != "extractive-fallback" {
				t.Fatalf("checkpoint %+v, want one by the extractive fallback", res.Checkpoint)
			}
		})
	}
}

// Creating a session whose trigger leaves it a threshold of 0 returns a
// warning with the session.
func TestCreateSessionWarnsOfAZeroThreshold(t *testing.T) {
	f := newFixture(t, nil)
	s, err := f.client.CreateSession(context.Background(), api.CreateSessionRequest{ID: "s1", Model: "claude-sonnet-4-5",
		Config: "[context_compaction]\ntrigger = { buffer_tokens = 200000 }\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "threshold is 0") {
		t.Fatalf("warnings = %q", s.Warnings)
	}
}
