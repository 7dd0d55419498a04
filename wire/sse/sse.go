// Package sse is the one decoder of server-sent event streams of the
// providers: it splits a stream into lines as its bytes pass (a tee), in
// time linear in the stream's length and memory bounded by the longest
// line allowed (Lines), reads a line's field (Field) and assembles lines
// into events (Events). Both providers' stream readers (wire/anthropic,
// wire/openai) and the proxy use it. (The daemon API's own event stream is
// read by api, which imports no package of ctxd.)
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

// Field splits one line (without its terminator) into its field name and
// value by the server-sent events rules: the name is what precedes the
// first colon, the value what follows it less one leading space; a line
// without a colon is a field with an empty value; a comment (a line
// beginning with a colon) has the name "" and ok false, as has an empty
// line. The slices share line's bytes.
func Field(line []byte) (name, value []byte, ok bool) {
	if len(line) == 0 || line[0] == ':' {
		return nil, nil, false
	}
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, nil, true
	}
	value = line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return line[:i], value, true
}

// Data returns the value of a "data" line (Field), ok false for any other
// line.
func Data(line []byte) (value []byte, ok bool) {
	name, value, ok := Field(line)
	if !ok || string(name) != "data" {
		return nil, false
	}
	return value, true
}

// Event is one dispatched event: its name (the last "event" field, "" for
// none) and its data (the "data" fields joined by newlines). The slices are
// valid only during the call that received them.
type Event struct {
	Name []byte
	Data []byte
}

// Events assembles fed bytes into events: "event" and "data" fields
// collect until a blank line dispatches them, when the event has data;
// comments, "id", "retry" and unknown fields are ignored. An event's data
// is bounded as one line is (Lines.Max): over it, the event is dropped and
// Err reports ErrLineTooLong. The zero value is ready. Not safe for
// concurrent use.
type Events struct {
	// Lines splits the stream; set Lines.Max to bound lines and events.
	Lines Lines
	name  []byte
	data  []byte
	// drop: the current event's data went over the limit.
	drop bool
	err  error
}

// Feed passes every event completed by p to fn.
func (e *Events) Feed(p []byte, fn func(Event)) {
	e.Lines.Feed(p, func(line []byte) {
		if len(line) == 0 {
			if len(e.data) > 0 && !e.drop {
				fn(Event{Name: e.name, Data: e.data})
			}
			e.name, e.data, e.drop = e.name[:0], e.data[:0], false
			return
		}
		name, value, ok := Field(line)
		if !ok {
			return
		}
		switch string(name) {
		case "event":
			e.name = append(e.name[:0], value...)
		case "data":
			max := e.Lines.Max
			if max <= 0 {
				max = DefaultMaxLine
			}
			if e.drop || len(e.data)+len(value) > max {
				if !e.drop && e.err == nil {
					e.err = fmt.Errorf("%w: an event's data over %d bytes", ErrLineTooLong, max)
				}
				e.drop, e.data = true, e.data[:0]
				return
			}
			if len(e.data) > 0 {
				e.data = append(e.data, '\n')
			}
			e.data = append(e.data, value...)
		}
	})
}

// Flush passes to fn the event whose data lines arrived but whose blank
// line did not (a stream that ended without it), if any; the unterminated
// line Lines holds is not read.
func (e *Events) Flush(fn func(Event)) {
	if len(e.data) > 0 && !e.drop {
		fn(Event{Name: e.name, Data: e.data})
	}
	e.name, e.data, e.drop = e.name[:0], e.data[:0], false
}

// Err is the first ErrLineTooLong of a line or an event's data, else nil.
func (e *Events) Err() error {
	if e.err != nil {
		return e.err
	}
	return e.Lines.Err()
}
