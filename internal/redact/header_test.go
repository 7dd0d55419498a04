package redact

import (
	"net/http"
	"slices"
	"testing"
)

// A request's credential headers give their values and, for "<scheme>
// <token>", the token; held on a redactor they are masked until released.
func TestHoldHeader(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer tok-123456789"}, "X-Api-Key": {"sk-abcdefghijk"}, "Accept": {"text/plain"}}
	got := HeaderSecrets(h)
	want := []string{"sk-abcdefghijk", "Bearer tok-123456789", "tok-123456789"}
	if !slices.Equal(got, want) {
		t.Fatalf("HeaderSecrets = %q, want %q", got, want)
	}
	r := New()
	release := r.HoldHeader(h)
	if s := r.String("key sk-abcdefghijk and tok-123456789"); s == "key sk-abcdefghijk and tok-123456789" {
		t.Fatalf("held credentials not masked: %q", s)
	}
	release()
	if s := r.String("key sk-abcdefghijk"); s != "key sk-abcdefghijk" {
		t.Fatalf("released credential still masked: %q", s)
	}
}
