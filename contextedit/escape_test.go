package contextedit

import (
	"strings"
	"testing"
)

// TestEscapePointer: RFC 6901 escaping, "~" before "/", through the
// fast path (nothing to escape) and the shared replacer.
func TestEscapePointer(t *testing.T) {
	for k, want := range map[string]string{
		"content":  "content",
		"a/b":      "a~1b",
		"m~n":      "m~0n",
		"~/":       "~0~1",
		"/~1":      "~1~01",
		"":         "",
		"old_text": "old_text",
	} {
		if got := escapePointer(k); got != want {
			t.Errorf("escapePointer(%q) = %q, want %q", k, got, want)
		}
	}
	if got := oneLine("a\r\nb\nc"); got != "a  b c" {
		t.Errorf("oneLine = %q", got)
	}
}

// BenchmarkEscapePointer: the keys of a typical tool input escaped with a
// replacer built per call (as before pointerEscaper) and with escapePointer,
// same run.
func BenchmarkEscapePointer(b *testing.B) {
	keys := []string{"file_path", "old_string", "new_string", "replace_all", "command", "a/b"}
	b.Run("replacer-per-call", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, k := range keys {
				_ = strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
			}
		}
	})
	b.Run("escapePointer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, k := range keys {
				_ = escapePointer(k)
			}
		}
	})
}
