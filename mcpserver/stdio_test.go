package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// lockedBuffer is stdout shared by the server's writes and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A pipe-driven client writes its requests and closes stdin at once: Serve
// answers every request it read before it returns (initialize, tools/list
// and a tools/call that reaches the daemon), in the order of the ids.
func TestServeAnswersEveryRequestReadBeforeEOF(t *testing.T) {
	c := daemon(t)
	session(t, c, "s1", "/home/dev/proj", "4242")
	srv, err := New(Options{Client: c, Session: "s1", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":"quokka"}}}
`)
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Serve(ctx, srv, in, &out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	got := map[int]string{}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdout line %q: %v", sc.Text(), err)
		}
		if m.Error != nil {
			t.Errorf("id %d: error %s", m.ID, m.Error)
		}
		got[m.ID] = string(m.Result)
	}
	if !strings.Contains(got[1], `"name":"ctxd"`) {
		t.Errorf("initialize answer %q", got[1])
	}
	if !strings.Contains(got[2], `"search"`) || !strings.Contains(got[2], `"read"`) {
		t.Errorf("tools/list answer %q", got[2])
	}
	if !strings.Contains(got[3], "quokka option 4242") {
		t.Errorf("tools/call answer %q", got[3])
	}
}

// The end of the input waits for the answers, but no longer than the
// bound: a request never answered releases it after the timeout, and a
// notification or a response from the client is nothing to wait for.
func TestDrainHoldsTheEndUntilAnsweredOrTimeout(t *testing.T) {
	read := func(d *drain) (time.Duration, error) {
		start := time.Now()
		buf := make([]byte, 4096)
		for {
			if _, err := (drainReader{d}).Read(buf); err != nil {
				return time.Since(start), err
			}
		}
	}
	var out lockedBuffer
	d := &drain{ctx: context.Background(), in: strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" + `{"jsonrpc":"2.0","id":"s1","result":{}}`),
		out: &out, answered: make(chan struct{}, 1), timeout: 200 * time.Millisecond}
	if took, err := read(d); err != io.EOF || took < 200*time.Millisecond {
		t.Fatalf("unanswered request: end after %v with %v, want io.EOF after the 200ms bound", took, err)
	}
	if d.requests != 1 {
		t.Fatalf("requests counted %d, want 1", d.requests)
	}

	d = &drain{ctx: context.Background(), in: strings.NewReader(`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]` + "\n"),
		out: &out, answered: make(chan struct{}, 1), timeout: 10 * time.Second}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = (drainWriter{d}).Write([]byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}` + "\n"))
		_, _ = (drainWriter{d}).Write([]byte(`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]` + "\n"))
	}()
	if took, err := read(d); err != io.EOF || took > 5*time.Second {
		t.Fatalf("answered batch: end after %v with %v, want io.EOF once answered", took, err)
	}
	if d.requests != 2 || d.responses != 2 {
		t.Fatalf("counted %d requests, %d responses; want 2 and 2", d.requests, d.responses)
	}
}

// A line that is not JSON ends Serve with the decoder's error (the SDK's
// stdio transport answers no -32700; docs/cli.md).
func TestServeInvalidJSONEnds(t *testing.T) {
	srv, err := New(Options{Client: &api.Client{BaseURL: "http://127.0.0.1:1"}, Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	err = Serve(context.Background(), srv, strings.NewReader("not json\n"), &out)
	if err == nil || !strings.Contains(err.Error(), "invalid character") {
		t.Fatalf("Serve of invalid JSON: %v, want the decoder's invalid character", err)
	}
}
