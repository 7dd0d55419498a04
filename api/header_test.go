package api

import "testing"

// TestHeaderValueIsASCII: the daemon's Ctxd-Diagnostic header
// carried "§" and "≥" as UTF-8 bytes, read by clients as Latin-1; header
// values are ASCII, § spelled "section".
func TestHeaderValueIsASCII(t *testing.T) {
	for in, want := range map[string]string{
		"the system prompt changes when the loop ends (docs/design.md §4a)": "the system prompt changes when the loop ends (docs/design.md section 4a)",
		"fixed prefix 9 tokens ≥ threshold 8\r\nx":                          "fixed prefix 9 tokens >= threshold 8  x",
		"naïve": "na?ve",
	} {
		if got := HeaderValue(in); got != want {
			t.Errorf("HeaderValue(%q) = %q, want %q", in, got, want)
		}
	}
}
