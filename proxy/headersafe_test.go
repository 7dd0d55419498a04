package proxy

import "testing"

// TestHeaderSafeSpellsSectionSign: the Ctxd-Diagnostic header used to
// show "docs/design.md ?4a"; header values spell § and the other characters
// of ctxd's diagnostics in ASCII, and stay one line of ASCII.
func TestHeaderSafeSpellsSectionSign(t *testing.T) {
	for in, want := range map[string]string{
		errClientRule.Error():                 "the client's own request breaks docs/design.md section 4a; forwarded as sent for the provider to judge",
		"fixed prefix 9 tokens ≥ threshold 8": "fixed prefix 9 tokens >= threshold 8",
		"a\nb — c… d é":                       "a b - c... d ?",
	} {
		got := headerSafe(in)
		if got != want {
			t.Errorf("headerSafe(%q) = %q, want %q", in, got, want)
		}
		for i := 0; i < len(got); i++ {
			if got[i] < 0x20 || got[i] > 0x7e {
				t.Errorf("headerSafe(%q) has byte %#x", in, got[i])
			}
		}
	}
}
