package redact

import (
	"slices"
	"strings"
	"testing"
)

func rev(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// TestPartialEchoes (docs/decisions.md "Partial and reversed echoes of a
// secret"): a 12-character prefix of a configured key and the key
// reversed used to pass the redactor. Any run of
// PartialLen bytes of a configured secret, forwards or backwards, is
// masked; a shorter run is not; an unconfigured key reversed is caught by
// its shape.
func TestPartialEchoes(t *testing.T) {
	const shapeless = "Zq7vLm2Pw9XkR4tY8nB3cD6hJ1fG5sA0" // a key of no known shape (a gateway's)
	r := New(anthropicKey, shapeless, "tok-0123456")     // the last shorter than PartialLen
	cases := []struct{ name, in, want string }{
		{"12-byte prefix", "key starting with " + shapeless[:12] + " is invalid", "key starting with " + Mask + " is invalid"},
		{"prefix with an ellipsis", "invalid key " + shapeless[:20] + "…", "invalid key " + Mask + "…"},
		{"suffix", "key ending in " + shapeless[len(shapeless)-12:], "key ending in " + Mask},
		{"middle", "x" + shapeless[5:19] + "y", "x" + Mask + "y"},
		{"reversed", "yek " + rev(shapeless) + " dilavni", "yek " + Mask + " dilavni"},
		{"reversed part", "(" + rev(shapeless)[3:17] + ")", "(" + Mask + ")"},
		{"anthropic key prefix", "key " + anthropicKey[:12] + "… was revoked", "key " + Mask + "… was revoked"},
		{"anthropic key reversed", "got " + rev(anthropicKey), "got " + Mask},
		{"two echoes", shapeless[:12] + " and " + shapeless[10:30], Mask + " and " + Mask},
		{"whole key next to text", "k=" + shapeless + "&x=1", "k=" + Mask + "&x=1"},
		{"11 bytes are not enough", "key starting with " + shapeless[:11], "key starting with " + shapeless[:11]},
		{"short secret whole", "tok-0123456!", Mask + "!"},
		{"short secret reversed", rev("tok-0123456"), Mask},
		{"nothing secret", "prompt is too long: 210000 tokens > 200000 maximum", "prompt is too long: 210000 tokens > 200000 maximum"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := r.String(c.in); got != c.want {
				t.Errorf("String(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
	// Not configured: a reversed key is still key-shaped.
	for _, k := range []string{anthropicKey, "sk-proj-abcdefghijklmnop1234"} {
		if got := String("echo: " + rev(k)); got != "echo: "+Mask {
			t.Errorf("String(reversed %q) = %q", k, got)
		}
	}
	// With keeps the partial rule for its extra secret.
	if got := New().With(shapeless).String(shapeless[4:16]); got != Mask {
		t.Errorf("With: %q", got)
	}
}

// FuzzPartialEchoes: whatever surrounds it, a run of PartialLen bytes of
// the configured secret never survives String.
func FuzzPartialEchoes(f *testing.F) {
	const secret = "Zq7vLm2Pw9XkR4tY8nB3cD6hJ1fG5sA0"
	f.Add("before ", "after", uint8(0), false)
	f.Add("", "", uint8(20), true)
	f.Add("Zq7vLm", "sA0", uint8(7), false)
	r := New(secret)
	f.Fuzz(func(t *testing.T, pre, post string, at uint8, reversed bool) {
		s := secret
		if reversed {
			s = rev(s)
		}
		from := int(at) % (len(s) - PartialLen + 1)
		part := s[from : from+PartialLen]
		got := r.String(pre + part + post)
		if strings.Contains(got, part) {
			t.Fatalf("String(%q) = %q keeps %q", pre+part+post, got, part)
		}
	})
}
