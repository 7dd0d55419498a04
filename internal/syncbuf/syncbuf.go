// Package syncbuf is a bytes.Buffer safe for concurrent use, for tests
// that read what a process or a logger writes while it is still writing.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer behind a mutex; its zero value is empty and
// ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
