package bodybuf

import (
	"io"
	"strings"
	"testing"
)

// Tee copies what is read to its writer; Capped keeps at most its size
// and reports a write it dropped.
func TestTeeIntoCapped(t *testing.T) {
	c := NewCapped(8)
	got, err := io.ReadAll(&Tee{ReadCloser: io.NopCloser(strings.NewReader("abcd")), W: c})
	if err != nil || string(got) != "abcd" || c.String() != "abcd" || c.Over() {
		t.Fatalf("read %q (%v), kept %q, over %v", got, err, c.String(), c.Over())
	}
	_, _ = c.Write([]byte("efghi"))
	if !c.Over() || c.String() != "abcd" {
		t.Fatalf("after a write past the cap: kept %q, over %v", c.String(), c.Over())
	}
}
