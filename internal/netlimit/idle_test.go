package netlimit

import (
	"io"
	"strings"
	"testing"
	"time"
)

// An answer whose next bytes do not come within the idle time is closed,
// and the read fails naming the key; one that keeps coming is read whole.
func TestIdleBody(t *testing.T) {
	pr, pw := io.Pipe()
	b := NewIdleBody(pr, 20*time.Millisecond, "the.key")
	_, err := b.Read(make([]byte, 8)) // nothing is written: the timer closes the pipe
	if err == nil || !strings.Contains(err.Error(), "the.key") {
		t.Fatalf("read of a silent body: %v, want an error naming the key", err)
	}
	_ = pw.Close()
	ok := NewIdleBody(io.NopCloser(strings.NewReader("hello")), time.Minute, "k")
	got, err := io.ReadAll(ok)
	if err != nil || string(got) != "hello" {
		t.Fatalf("ReadAll = %q, %v", got, err)
	}
	_ = ok.Close()
}
