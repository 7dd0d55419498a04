package bearer

import (
	"net/http"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		name, header, want string
		ok                 bool
	}{
		{"the token", "Bearer s3cret", "s3cret", true},
		{"scheme in any case", "bearer s3cret", "s3cret", true},
		{"wrong token", "Bearer s3cre", "s3cret", false},
		{"longer token", "Bearer s3cret0", "s3cret", false},
		{"no header", "", "s3cret", false},
		{"basic auth", "Basic czNjcmV0", "s3cret", false},
		{"empty token", "Bearer ", "s3cret", false},
		{"no secret configured", "Bearer ", "", false},
		{"no secret, empty token", "Bearer", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "http://127.0.0.1/", nil)
			if c.header != "" {
				r.Header.Set("Authorization", c.header)
			}
			if got := Check(r, c.want); got != c.ok {
				t.Errorf("Check(%q, %q) = %v, want %v", c.header, c.want, got, c.ok)
			}
		})
	}
}

// BenchmarkEqual compares a matching token with one that differs in its
// first byte: the times must be alike (no early exit).
func BenchmarkEqual(b *testing.B) {
	want := "0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ name, got string }{
		{"match", want},
		{"first-byte-differs", "x123456789abcdef0123456789abcdef"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				Equal(c.got, want)
			}
		})
	}
}
