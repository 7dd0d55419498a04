package bodybuf

import (
	"bytes"
	"io"
)

// Tee is a body that copies what is read of it to W (a stream reader or
// a buffer); W's errors are ignored.
type Tee struct {
	io.ReadCloser
	W io.Writer
}

func (t *Tee) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		_, _ = t.W.Write(p[:n])
	}
	return n, err
}

// Capped is a buffer that keeps at most max bytes: a write beyond them
// is dropped whole, and Over reports it.
type Capped struct {
	bytes.Buffer
	max  int
	over bool
}

// NewCapped is a Capped of at most max bytes.
func NewCapped(max int) *Capped { return &Capped{max: max} }

// Over reports whether a write was dropped.
func (b *Capped) Over() bool { return b.over }

func (b *Capped) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		b.over = true
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
