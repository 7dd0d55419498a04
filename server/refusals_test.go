package server

// Requests the daemon API used to accept or answer wrongly: image media
// types the providers refuse, an empty assistant message, content types,
// an empty label key, an append carrying seq. Each test failed before its
// fix (docs/decisions.md "Daemon API details found by outside testing").

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// refusedUnchanged sends body to path and wants status with code and
// field, the field named in the message, and nothing stored in session s1
// (its last_seq and the number of sessions unchanged).
func (f *fixture) refusedUnchanged(t *testing.T, method, path, body string, hdr map[string]string, status int, code, field string) {
	t.Helper()
	before, n := f.lastSeq(t, "s1"), f.sessions(t)
	got, ae, raw, _ := f.do(t, method, path, body, hdr)
	if got != status || ae == nil || ae.Code != code {
		t.Fatalf("got %d %s, want %d %s", got, raw, status, code)
	}
	if ae.Field != field || !strings.Contains(ae.Message, field) {
		t.Errorf("field %q (message %q), want %q named", ae.Field, ae.Message, field)
	}
	if after := f.lastSeq(t, "s1"); after != before {
		t.Errorf("last_seq %d after a refused request, want %d", after, before)
	}
	if after := f.sessions(t); after != n {
		t.Errorf("%d sessions after a refused request, want %d", after, n)
	}
}

// TestImageMediaTypeProvidersRefuseIs400: an image block of text/html was
// stored and rendered as a data: URL; only the types both providers accept
// (JPEG, PNG, GIF, WebP) are stored.
func TestImageMediaTypeProvidersRefuseIs400(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	img := func(mt string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","media_type":"` + mt + `","data":"aGk="}]}]}`
	}
	for _, mt := range []string{"text/html", "image/svg+xml", "image/bmp", "image/PNG", "application/pdf"} {
		t.Run(mt, func(t *testing.T) {
			f.refusedUnchanged(t, "POST", "/v1/sessions/s1/messages", img(mt), nil, http.StatusBadRequest, api.Invalid, "messages[0].content[1].media_type")
		})
	}
	for _, mt := range []string{"image/jpeg", "image/png", "image/gif", "image/webp"} {
		if status, _, raw, _ := f.do(t, "POST", "/v1/sessions/s1/messages", img(mt), nil); status != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", mt, status, raw)
		}
	}
}

// TestEmptyAssistantMessageIs400: an assistant message with no blocks was
// stored; the Anthropic rendering dropped it and the OpenAI one sent
// content "" (two renderings of one context that disagree, and Anthropic
// refuses an empty message before the last). It is refused, naming the
// field.
func TestEmptyAssistantMessageIs400(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "hi")}}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"messages":[{"role":"assistant","content":[]},{"role":"user","content":[{"type":"text","text":"y"}]}]}`,
		`{"messages":[{"role":"assistant","content":[]}]}`,
		`{"messages":[{"role":"assistant"}]}`,
	} {
		f.refusedUnchanged(t, "POST", "/v1/sessions/s1/messages", body, nil, http.StatusBadRequest, api.Invalid, "messages[0].content")
	}
	// The renderings of what is stored agree on the number of assistant
	// messages.
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleAssistant, "hello"), text(api.RoleUser, "bye")}}); err != nil {
		t.Fatal(err)
	}
	count := func(format string) int {
		raw, err := f.client.ContextRaw(ctx, "s1", format)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range body.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
		return n
	}
	if a, o := count(api.FormatAnthropic), count(api.FormatOpenAI); a != 1 || o != 1 {
		t.Errorf("assistant messages: anthropic %d, openai %d; want 1 and 1", a, o)
	}
}

// TestContentTypes: a JSON endpoint takes application/json with no
// charset or utf-8 (and a body without Content-Type, which curl --json and
// the Go client never send but scripts do); any other type, or JSON
// declared in another charset, is 415 naming Content-Type.
func TestContentTypes(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`
	for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "application/json; charset=latin1", "application/json; charset=utf-16", "application/jsonx", "application/json; charset"} {
		t.Run(ct, func(t *testing.T) {
			f.refusedUnchanged(t, "POST", "/v1/sessions/s1/messages", body, map[string]string{"Content-Type": ct}, http.StatusUnsupportedMediaType, api.UnsupportedMediaType, "Content-Type")
		})
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; charset=UTF-8", ""} {
		req, err := http.NewRequest("POST", f.ts.URL+"/v1/sessions/s1/messages", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+f.token)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := f.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Content-Type %q: %d, want 200", ct, resp.StatusCode)
		}
	}
}

// TestEmptyLabelKeyIs400: labels {"": "x"} was stored.
func TestEmptyLabelKeyIs400(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	f.refusedUnchanged(t, "POST", "/v1/sessions", `{"id":"s2","model":"gpt-4o","labels":{"team":"a","":"x"}}`, nil, http.StatusBadRequest, api.Invalid, "labels")
	if _, err := f.client.GetSession(context.Background(), "s2"); api.ErrorCode(err) != api.NotFound {
		t.Errorf("a refused create left s2 behind: %v", err)
	}
}

// TestAppendWithSeqIs400: a client-sent seq was silently dropped (the
// message landed elsewhere than the client said). ctxd assigns positions
// (docs/decisions.md): a seq on an appended message is refused, naming it.
func TestAppendWithSeqIs400(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	ctx := context.Background()
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "hi")}}); err != nil {
		t.Fatal(err)
	}
	f.refusedUnchanged(t, "POST", "/v1/sessions/s1/messages",
		`{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"}]},{"seq":999,"role":"user","content":[{"type":"text","text":"x"}]}]}`,
		nil, http.StatusBadRequest, api.Invalid, "messages[1].seq")
	// Even the seq it would get is refused: the field is not an expected
	// position.
	f.refusedUnchanged(t, "POST", "/v1/sessions/s1/messages",
		`{"messages":[{"seq":2,"role":"assistant","content":[{"type":"text","text":"a"}]}]}`,
		nil, http.StatusBadRequest, api.Invalid, "messages[0].seq")
}

// TestHeaderBytesLimitExact: daemon.limits.header_bytes is exact. A
// request whose line and headers are exactly the limit is served; one byte
// more is answered 431 header_too_large naming the key, though net/http
// alone would read 4096 bytes more; a header far past that gets net/http's
// own 431.
func TestHeaderBytesLimitExact(t *testing.T) {
	const limit = 4096
	f := newFixture(t, func(o *Options) { o.HeaderBytes = limit })
	host := strings.TrimPrefix(f.ts.URL, "http://")
	// get sends a GET /v1/status whose line and headers (the blank line
	// that ends them aside) are size bytes.
	get := func(size int) (*http.Response, []byte) {
		h := "GET /v1/status HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + fixtureToken + "\r\n"
		h += "X-Pad: " + strings.Repeat("p", size-len(h)-len("X-Pad: \r\n")) + "\r\n\r\n"
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, h); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp, b
	}
	if resp, b := get(limit); resp.StatusCode != http.StatusOK {
		t.Fatalf("headers of exactly the limit: %d %s", resp.StatusCode, b)
	}
	for _, size := range []int{limit + 1, limit + 3000} {
		resp, b := get(size)
		var env api.ErrorEnvelope
		if err := json.Unmarshal(b, &env); err != nil || env.Error == nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge ||
			env.Error.Code != api.HeaderTooLarge || !strings.Contains(env.Error.Message, "daemon.limits.header_bytes") {
			t.Fatalf("headers of %d bytes: %d %s", size, resp.StatusCode, b)
		}
	}
	if resp, b := get(64 << 10); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("headers of 64 KiB: %d %s", resp.StatusCode, b)
	}
}
