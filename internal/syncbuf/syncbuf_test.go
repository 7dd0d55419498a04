package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWritesAndReads: writers and a reader at once (run with
// -race) lose no byte.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 400) {
		t.Fatalf("%d bytes, want 400", len(got))
	}
}
