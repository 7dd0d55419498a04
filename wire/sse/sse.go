// Package sse splits a server-sent event stream into lines as its bytes
// pass (a tee), in time linear in the stream's length and memory bounded
// by the longest line allowed. Both providers' stream readers (wire/anthropic,
// wire/openai) use it.
package sse

import (
	"bytes"
	"errors"
	"fmt"
)

// DefaultMaxLine is the longest line, in bytes, a Lines keeps when its Max
// is 0: 16 MiB, far above any event a provider sends (a whole tool call's
// input arrives in many small deltas).
const DefaultMaxLine = 16 << 20

// ErrLineTooLong: a line was longer than the limit; it was dropped, not
// held.
var ErrLineTooLong = errors.New("server-sent event line too long")

// Lines splits fed bytes into lines ("\n" or "\r\n" terminated). The zero
// value is ready, with DefaultMaxLine. Not safe for concurrent use.
type Lines struct {
	// Max is the longest line kept, in bytes; 0 means DefaultMaxLine.
	Max  int
	line []byte
	// skip: the current line went over Max; its rest is dropped.
	skip bool
	err  error
}

// Feed passes every complete line of p (the bytes after the last call's
// unterminated line) to fn, without its terminator. The line's bytes are
// valid only during the call. A line longer than Max is dropped and Err
// reports it; the lines after it are read as usual.
func (l *Lines) Feed(p []byte, fn func(line []byte)) {
	max := l.Max
	if max <= 0 {
		max = DefaultMaxLine
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !l.skip {
			if len(l.line)+len(chunk) > max {
				l.skip, l.line = true, nil
				if l.err == nil {
					l.err = fmt.Errorf("%w: over %d bytes", ErrLineTooLong, max)
				}
			}
		}
		if i < 0 {
			if !l.skip {
				l.line = append(l.line, chunk...)
			}
			return
		}
		if l.skip {
			l.skip = false
		} else {
			line := chunk
			if len(l.line) > 0 {
				l.line = append(l.line, chunk...)
				line = l.line
			}
			fn(bytes.TrimSuffix(line, []byte("\r")))
			l.line = l.line[:0]
		}
		p = p[i+1:]
	}
}

// Pending is the unterminated line held so far (nil after a too-long
// line).
func (l *Lines) Pending() []byte { return l.line }

// Err is ErrLineTooLong (wrapped with the limit) once a line went over the
// limit, else nil.
func (l *Lines) Err() error { return l.err }
