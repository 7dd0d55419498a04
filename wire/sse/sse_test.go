package sse

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// TestLinesCutAnywhere: lines split across feeds, CRLF endings and an
// unterminated tail come out as the whole stream's lines.
func TestLinesCutAnywhere(t *testing.T) {
	stream := "data: a\r\n\ndata: bb\nevent: x\ndata: tail"
	for step := 1; step <= len(stream); step++ {
		var l Lines
		var got []string
		for i := 0; i < len(stream); i += step {
			l.Feed([]byte(stream[i:min(i+step, len(stream))]), func(line []byte) { got = append(got, string(line)) })
		}
		if strings.Join(got, "|") != "data: a||data: bb|event: x" || string(l.Pending()) != "data: tail" || l.Err() != nil {
			t.Fatalf("step %d: %q pending %q err %v", step, got, l.Pending(), l.Err())
		}
	}
}

// TestLineTooLong: a line over Max is dropped without being held (memory
// stays near Max however long the line), Err names the limit, and the
// lines after it are read.
func TestLineTooLong(t *testing.T) {
	l := Lines{Max: 1 << 10}
	var got []string
	chunk := []byte(strings.Repeat("x", 64<<10))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l.Feed([]byte("data: "), func(line []byte) { got = append(got, string(line)) })
	for i := 0; i < 1024; i++ { // a 64 MiB line
		l.Feed(chunk, func(line []byte) { got = append(got, string(line)) })
	}
	runtime.ReadMemStats(&after)
	l.Feed([]byte("\ndata: ok\n"), func(line []byte) { got = append(got, string(line)) })
	if !errors.Is(l.Err(), ErrLineTooLong) || !strings.Contains(l.Err().Error(), "1024") {
		t.Fatalf("err %v", l.Err())
	}
	if len(got) != 1 || got[0] != "data: ok" {
		t.Fatalf("lines %q", got)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Errorf("a 64 MiB line over a 1 KiB limit allocated %d bytes", d)
	}
}
