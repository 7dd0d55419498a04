package redact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const anthropicKey = "sk-ant-api03-AbCdEf0123456789_abcdefghijklmnopqrstuvwxyz-0123456789AA"

func TestString(t *testing.T) {
	r := New("my-own-token-value-1", "short")
	cases := []struct{ name, in, want string }{
		{"anthropic key echoed", "invalid x-api-key: " + anthropicKey, "invalid x-api-key: " + Mask},
		{"anthropic key in prose", "key " + anthropicKey + " was revoked", "key " + Mask + " was revoked"},
		{"openai key", "Incorrect API key provided: sk-proj-abcdefghijklmnop1234. You can find", "Incorrect API key provided: " + Mask + ". You can find"},
		{"openai key masked by the provider", "Incorrect API key provided: sk-proj-****1234.", "Incorrect API key provided: sk-proj-****1234."},
		{"bearer header", "Authorization: Bearer abc.def-123_456", "Authorization: Bearer " + Mask},
		{"bearer in prose", "Bearer authentication failed", "Bearer authentication failed"},
		{"json field", `{"api_key": "q1w2e3r4t5y6"}`, `{"api_key": "` + Mask + `"}`},
		{"configured secret", "token my-own-token-value-1 refused", "token " + Mask + " refused"},
		{"too short to be a configured secret", "a short answer", "a short answer"},
		{"google", "key=AIzaSyA1234567890abcdefghijklmnopqrstu", "key=" + Mask},
		{"ordinary hyphenated words", "task-management-system-v2 and sk-learn", "task-management-system-v2 and sk-learn"},
		{"nothing secret", "prompt is too long: 210000 tokens > 200000 maximum", "prompt is too long: 210000 tokens > 200000 maximum"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := r.String(c.in); got != c.want {
				t.Errorf("String(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
	if got := String("x-api-key: " + anthropicKey); strings.Contains(got, "AbCdEf") {
		t.Errorf("package String left the key: %q", got)
	}
}

func TestErrorKeepsTheChain(t *testing.T) {
	base := errors.New("sentinel")
	err := fmt.Errorf("provider said invalid x-api-key: %s: %w", anthropicKey, base)
	red := New().Error(err)
	if strings.Contains(red.Error(), anthropicKey) || !errors.Is(red, base) {
		t.Fatalf("redacted %q, Is sentinel %v", red, errors.Is(red, base))
	}
	if plain := errors.New("nothing here"); New().Error(plain) != plain {
		t.Error("an error without a secret was wrapped")
	}
	if New().Error(nil) != nil {
		t.Error("nil became non-nil")
	}
}

// TestHandler: every level, message, string, error, group and With
// attribute passes through the redactor.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	r := New("configured-secret-42")
	log := slog.New(Handler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), r))
	log = log.With("auth", "Bearer configured-secret-42")
	ctx := context.Background()
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		log.Log(ctx, l, "provider said invalid x-api-key: "+anthropicKey,
			"err", errors.New("401: "+anthropicKey),
			slog.Group("g", "body", `{"error":{"message":"bad key configured-secret-42"}}`),
			"list", []string{anthropicKey})
	}
	out := buf.String()
	if strings.Count(out, "\n") != 4 {
		t.Fatalf("want 4 lines:\n%s", out)
	}
	for _, secret := range []string{anthropicKey, "configured-secret-42", "AbCdEf0123"} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds %q:\n%s", secret, out)
		}
	}
	r.SetSecrets("another-secret-777")
	log.Info("now another-secret-777 and configured-secret-42")
	if last := buf.String()[len(out):]; strings.Contains(last, "another-secret-777") {
		t.Errorf("SetSecrets not applied: %s", last)
	}
}
