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

// TestField: name and value by the SSE rules: one space after the colon
// dropped, a line without a colon a field with no value, comments and
// blank lines no field.
func TestField(t *testing.T) {
	for _, c := range []struct {
		line, name, value string
		ok                bool
	}{
		{"data: {\"a\":1}", "data", `{"a":1}`, true},
		{"data:{\"a\":1}", "data", `{"a":1}`, true},
		{"data:  two", "data", " two", true},
		{"event: message_start", "event", "message_start", true},
		{"data", "data", "", true},
		{": ping", "", "", false},
		{"", "", "", false},
	} {
		name, value, ok := Field([]byte(c.line))
		if string(name) != c.name || string(value) != c.value || ok != c.ok {
			t.Errorf("Field(%q) = %q, %q, %v; want %q, %q, %v", c.line, name, value, ok, c.name, c.value, c.ok)
		}
	}
	if v, ok := Data([]byte("data: [DONE]")); !ok || string(v) != "[DONE]" {
		t.Errorf("Data = %q, %v", v, ok)
	}
	if _, ok := Data([]byte("event: data")); ok {
		t.Error("Data took an event line")
	}
}

// TestEventsCutAnywhere: events come out whole however the stream is cut,
// data lines joined by newlines, the last event name kept, comments and
// other fields ignored, an event without data not dispatched, and Flush
// passing an event whose blank line never came.
func TestEventsCutAnywhere(t *testing.T) {
	stream := ": ping\n\nevent: a\ndata: 1\n\nid: 7\nevent: b\ndata: x\r\ndata: y\nretry: 5\n\nevent: empty\n\ndata: last\n"
	want := []string{"a=1", "b=x\ny", "=last"}
	for cut := 0; cut <= len(stream); cut++ {
		var e Events
		var got []string
		fn := func(ev Event) { got = append(got, string(ev.Name)+"="+string(ev.Data)) }
		e.Feed([]byte(stream[:cut]), fn)
		e.Feed([]byte(stream[cut:]), fn)
		e.Flush(fn)
		if strings.Join(got, "|") != strings.Join(want, "|") || e.Err() != nil {
			t.Fatalf("cut at %d: %q, err %v; want %q", cut, got, e.Err(), want)
		}
	}
}

// TestEventDataOverTheLimit: an event whose data lines together pass the
// limit is dropped and reported; the events after it are read.
func TestEventDataOverTheLimit(t *testing.T) {
	e := Events{Lines: Lines{Max: 8}}
	var got []string
	e.Feed([]byte("data: 12345\ndata: 67890\n\ndata: ok\n\n"), func(ev Event) { got = append(got, string(ev.Data)) })
	if !errors.Is(e.Err(), ErrLineTooLong) || len(got) != 1 || got[0] != "ok" {
		t.Errorf("got %q, err %v", got, e.Err())
	}
}
