package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestOversizedBodyWrittenWholeFirst (finding 3): a client that writes its
// whole body over proxy.limits.body_bytes before reading the answer (Python's
// http.client does) — 16 MiB over, more than the sockets' buffers hold —
// gets the proxy's 413 naming the limit, not a broken
// pipe or a reset, with and without a Content-Length; nothing reaches the
// upstream.
func TestOversizedBodyWrittenWholeFirst(t *testing.T) {
	f := newFixture(t, testConfig())
	maxBody := int(f.p.Limits().BodyBytes)
	body := `{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("x", maxBody+16<<20) + `"}]}`
	host := strings.TrimPrefix(f.url, "http://")
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			conn, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The head, then the body in writes of 1 MiB (no copy of it).
			var head bytes.Buffer
			fmt.Fprintf(&head, "POST /v1/messages HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\nAnthropic-Version: 2023-06-01\r\nContent-Type: application/json\r\n", host, testKey)
			if chunked {
				fmt.Fprintf(&head, "Transfer-Encoding: chunked\r\n\r\n%x\r\n", len(body))
			} else {
				fmt.Fprintf(&head, "Content-Length: %d\r\n\r\n", len(body))
			}
			parts := [][]byte{head.Bytes()}
			for i := 0; i < len(body); i += 1 << 20 {
				parts = append(parts, []byte(body[i:min(i+1<<20, len(body))]))
			}
			if chunked {
				parts = append(parts, []byte("\r\n0\r\n\r\n"))
			}
			for _, p := range parts {
				if _, err := conn.Write(p); err != nil {
					t.Fatalf("writing the whole body first: %v", err)
				}
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), fmt.Sprintf("over %d bytes", maxBody)) || !strings.Contains(string(b), `"request_too_large"`) {
				t.Fatalf("got %d %s", resp.StatusCode, b)
			}
		})
	}
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// TestEncodedBodyNamesTheEncoding (finding 4): a managed endpoint's body
// sent with Content-Encoding: gzip is forwarded untouched (its encoded
// bytes and the header), and the diagnostic names the encoding rather than
// calling the body "not a JSON object".
func TestEncodedBodyNamesTheEncoding(t *testing.T) {
	f := newOpenAIFixture(t, openAIConfig(nil))
	for _, c := range []struct{ path, body string }{
		{"/v1/messages", `{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"gpt-5.2-codex","input":"hi","stream":true}`},
	} {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write([]byte(c.body))
		_ = zw.Close()
		n := len(f.up.requests())
		req, _ := http.NewRequest("POST", f.url+c.path, bytes.NewReader(z.Bytes()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		req.Header.Set("X-Api-Key", testKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		diag := resp.Header.Get(HeaderDiagnostic)
		if !strings.Contains(diag, `Content-Encoding "gzip"`) || strings.Contains(diag, "JSON") || resp.Header.Get(HeaderSessionID) != "" {
			t.Errorf("%s: diagnostic %q, session %q", c.path, diag, resp.Header.Get(HeaderSessionID))
		}
		reqs := f.up.requests()
		if len(reqs) != n+1 || !bytes.Equal(reqs[n].body, z.Bytes()) || reqs[n].header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s: not forwarded untouched (%d requests)", c.path, len(reqs)-n)
		}
	}
}
