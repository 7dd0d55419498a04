package redact

import (
	"strings"
	"testing"
)

// legacyString is String as it was before partial echoes were masked
// (whole secrets with strings.ReplaceAll, the key shapes without the
// reversed ones): the baseline of BenchmarkString.
func legacyString(secrets []string, s string) string {
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Mask)
	}
	for _, sh := range keyShapes {
		if strings.Contains(sh.re.String(), "-tna-ks") {
			continue
		}
		s = sh.replace(s)
	}
	return s
}

// BenchmarkString compares today's redaction (partial runs, reversed keys)
// with the legacy one on what the daemon redacts: a log line with no
// secret, and a 2 KB provider error body echoing a key, with three
// configured secrets (two provider keys and the TCP token).
func BenchmarkString(b *testing.B) {
	secrets := []string{anthropicKey, "sk-proj-Zq7vLm2Pw9XkR4tY8nB3cD6hJ1fG5sA0xx", "tcp-token-0123456789abcdef"}
	inputs := map[string]string{
		"log line": `time=2026-12-01T12:00:00Z level=INFO msg="compaction done" session=s1 binding=primary tokens_before=182340 tokens_after=40211 elapsed=2.3s`,
		"error body 2KB": `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: ` + anthropicKey[:20] + `…"}} ` +
			strings.Repeat("the request could not be processed because of an upstream problem; ", 28),
	}
	r := New(secrets...)
	for name, in := range inputs {
		b.Run(name+"/legacy", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				_ = legacyString(secrets, in)
			}
		})
		b.Run(name+"/partial", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				_ = r.String(in)
			}
		})
	}
}

// BenchmarkMask is the partial-run scan alone, per byte of text.
func BenchmarkMask(b *testing.B) {
	set := compile([]string{anthropicKey, "sk-proj-Zq7vLm2Pw9XkR4tY8nB3cD6hJ1fG5sA0xx", "tcp-token-0123456789abcdef"})
	in := strings.Repeat("the request could not be processed because of an upstream problem; ", 30)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		_ = set.mask(in)
	}
}
