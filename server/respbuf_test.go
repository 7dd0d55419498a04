package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// contextAnswer is a pre-send read's answer of the 500-agent run's size:
// 40 messages, a tool result of ~3 KB each (~60 KB encoded).
func contextAnswer() api.ContextResponse {
	var msgs []api.Message
	for i := range 20 {
		msgs = append(msgs, api.Message{Seq: uint64(2*i + 1), Role: api.RoleAssistant, Content: []api.Block{
			{Type: api.BlockToolCall, ID: fmt.Sprintf("c%d", i), Name: "bash", Input: json.RawMessage(`{"command":"ls -la /tmp"}`)}}},
			api.Message{Seq: uint64(2*i + 2), Role: api.RoleTool, ToolCallID: fmt.Sprintf("c%d", i), ToolName: "bash",
				Content: []api.Block{{Type: api.BlockText, Text: strings.Repeat("drwxr-xr-x 2 root <root> & 4096 file\n", 80)}}})
	}
	return api.ContextResponse{System: "You are a coding agent.", Messages: msgs, Threshold: 8400, ContextLimit: 12000}
}

// TestWriteJSONPooledBuffersKeepTheBytes: answers written one after the
// other through the pooled buffers are each exactly encodeJSON's bytes — a
// reused buffer never leaks a previous, longer answer's tail into a
// shorter one.
func TestWriteJSONPooledBuffersKeepTheBytes(t *testing.T) {
	big := contextAnswer()
	small := api.RunResponse{Seq: 7}
	for i := range 4 {
		var v any = big
		if i%2 == 1 {
			v = small
		}
		want, err := encodeJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		writeJSON(rec, http.StatusOK, v)
		if !bytes.Equal(rec.Body.Bytes(), want) {
			t.Fatalf("answer %d: %d bytes written, want encodeJSON's %d", i, rec.Body.Len(), len(want))
		}
		if ct := rec.Header().Get("Content-Type"); ct != api.ContentTypeJSON {
			t.Fatalf("answer %d: Content-Type %q", i, ct)
		}
	}
	if !bytes.Contains(mustEncode(t, big), []byte("<root> & 4096")) {
		t.Fatal("HTML characters were escaped")
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := encodeJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadBodySizedByContentLength: the body is read whole whatever the
// declared length says (it only sizes the buffer).
func TestReadBodySizedByContentLength(t *testing.T) {
	body := strings.Repeat("x", 3000)
	for _, n := range []int64{-1, 0, 10, 3000, 5000, api.MaxRequestBytes + 1} {
		got, err := readBody(strings.NewReader(body), n)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if string(got) != body {
			t.Fatalf("n=%d: read %d bytes, want %d", n, len(got), len(body))
		}
	}
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkWriteContextAnswer: a pre-send read's answer encoded into a pooled
// buffer (writeJSON) against a fresh buffer per answer (what writeJSON did
// before the buffers were pooled), same run. B/op is the point: the garbage
// collector's work under the 500-agent load.
func BenchmarkWriteContextAnswer(b *testing.B) {
	v := contextAnswer()
	w := &discardWriter{h: http.Header{}}
	b.Run("fresh-buffer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, err := encodeJSON(v)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = w.Write(buf)
		}
	})
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeJSON(w, http.StatusOK, v)
		}
	})
}

// BenchmarkReadAppendBody: an append body read with io.ReadAll against
// readBody sized by its Content-Length, same run.
func BenchmarkReadAppendBody(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 48<<10)
	b.Run("io.ReadAll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := io.ReadAll(bytes.NewReader(body)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sized", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readBody(bytes.NewReader(body), int64(len(body))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
