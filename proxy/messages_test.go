package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire"
)

// The outgoing request is the client's body with only messages replaced:
// every other byte is the client's, and every other field, as JSON, too.
func TestOutgoingReplacesOnlyMessages(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("list the files")
	body := c.body()
	resp, got := f.post(body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	reqs := f.up.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	out := reqs[0].body
	in, _ := parseRequest([]byte(body))
	o, err := parseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[:o.MsgStart], []byte(body)[:in.MsgStart]) || !bytes.Equal(out[o.MsgEnd:], []byte(body)[in.MsgEnd:]) {
		t.Errorf("bytes around messages differ:\n%s\n%s", out, body)
	}
	a, b := otherFields(t, []byte(body)), otherFields(t, out)
	if len(a) != len(b) || len(a) < 6 {
		t.Fatalf("fields %v vs %v", a, b)
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("field %s: %s, want %s", k, b[k], v)
		}
	}
	msgs := outgoingMessages(t, out)
	if len(msgs) != 1 || !strings.Contains(string(out), `"text":"list the files","cache_control":{"type":"ephemeral"}`) {
		t.Errorf("messages = %s", out[o.MsgStart:o.MsgEnd])
	}
	if reqs[0].path != "/v1/messages?beta=true" || reqs[0].header.Get("X-Api-Key") != testKey || reqs[0].header.Get("Anthropic-Version") != "2023-06-01" {
		t.Errorf("path %s headers %v", reqs[0].path, reqs[0].header)
	}
	if resp.Header.Get(HeaderSessionID) == "" {
		t.Error("no session header on the answer")
	}
}

// A streamed answer reaches the client byte for byte, and is recorded:
// thinking with its signature, the tool call with its assembled input, and
// the usage.
func TestStreamPassedThroughAndRecorded(t *testing.T) {
	f := newFixture(t, testConfig())
	stream := sse("plan", "Listing.", [][3]string{{"toolu_1", "Bash", `{"command":"ls -la"}`}}, 1234, 56)
	f.up.script(reply{stream: true, body: stream})
	resp, got := f.post(newConversation().user("list the files").body(), nil)
	if string(got) != stream {
		t.Fatalf("client got %q\nwant %q", got, stream)
	}
	id := resp.Header.Get(HeaderSessionID)
	f.settle()
	a, err := f.eng.Context(context.Background(), id, engineNoPreSend)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Messages) != 2 {
		t.Fatalf("recorded %d messages", len(a.Messages))
	}
	m := a.Messages[1]
	if m.Role != history.RoleAssistant || len(m.Content) != 3 || m.Content[0].Signature != "sig-plan" ||
		string(m.Content[2].Input) != `{"command":"ls -la"}` || m.Usage == nil || m.Usage.InputTokens != 1234 || m.Usage.OutputTokens != 56 {
		t.Errorf("recorded %+v usage %+v", m.Content, m.Usage)
	}
}

// A conversation over several requests: each request appends only what is
// new, each outgoing request extends the previous one (markers aside), and
// an identical resend records nothing and sends the same request again.
func TestAppendOnlyAndIdempotentResend(t *testing.T) {
	f := newFixture(t, testConfig())
	c := newConversation().user("fix the bug")
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_1", "Bash", `{"command":"go test"}`}}, 500, 20)})
	resp, _ := f.post(c.body(), nil)
	id := resp.Header.Get(HeaderSessionID)

	c.assistant(assistantCall("toolu_1", "Bash", `{"command":"go test"}`)).results([2]string{"toolu_1", "FAIL: TestX"})
	f.up.script(reply{stream: true, body: sse("", "", [][3]string{{"toolu_2", "Read", `{"file_path":"x.go"}`}}, 700, 20)})
	resp2, _ := f.post(c.body(), nil)
	if resp2.Header.Get(HeaderSessionID) != id {
		t.Fatalf("second request went to %s, want %s", resp2.Header.Get(HeaderSessionID), id)
	}
	c.assistant(assistantCall("toolu_2", "Read", `{"file_path":"x.go"}`)).results([2]string{"toolu_2", "package x"})
	third := c.body()
	f.post(third, nil)
	f.settle()
	before := messageEvents(t, f, id)
	f.post(third, nil) // the client retries the same request
	f.settle()
	if after := messageEvents(t, f, id); after != before {
		t.Errorf("a resend recorded messages: %d → %d", before, after)
	}
	reqs := f.up.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for i := 1; i < 3; i++ {
		prev, next := normalizedMessages(t, reqs[i-1].body), normalizedMessages(t, reqs[i].body)
		if len(next) <= len(prev) {
			t.Fatalf("request %d has %d messages after %d", i, len(next), len(prev))
		}
		for j := range prev {
			if prev[j] != next[j] {
				t.Errorf("request %d message %d changed:\n%s\n%s", i, j, prev[j], next[j])
			}
		}
	}
	if !bytes.Equal(reqs[3].body, reqs[2].body) {
		t.Errorf("resend sent another body:\n%s\n%s", reqs[3].body, reqs[2].body)
	}
	// 1 user, answer, result, answer, result, and the last answer.
	f.settle()
	if n := messageEvents(t, f, id); n != 6 {
		t.Errorf("%d messages recorded, want 6", n)
	}
}

var engineNoPreSend = engineContextNoPreSend()

func messageEvents(t *testing.T, f *fixture, id string) int {
	t.Helper()
	n := 0
	err := f.eng.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindMessage {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// normalizedMessages returns the outgoing messages, each without its cache
// markers, as JSON text.
func normalizedMessages(t *testing.T, body []byte) []string {
	t.Helper()
	r, err := parseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = string(wire.Normalize(m))
	}
	return out
}

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"type":"text","text":"a"}`, `{"type":"text","text":"a"}`},
		{`{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}`, `{"type":"text","text":"a"}`},
		{`{"cache_control":{"type":"ephemeral","ttl":"1h"},"type":"text"}`, `{"type":"text"}`},
		{`{"cache_control" : {"type":"x"} , "type":"text"}`, `{"type":"text"}`},
		{`{"text":"say \"cache_control\": no","cache_control":{}}`, `{"text":"say \"cache_control\": no"}`},
		{`{"text":"cache_control","k":"\"cache_control\""}`, `{"text":"cache_control","k":"\"cache_control\""}`},
	} {
		if got := string(wire.Normalize([]byte(c.in))); got != c.want {
			t.Errorf("wire.Normalize(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	f.Add(`{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}`)
	f.Add(`{"cache_control":{"type":"ephemeral"},"a":[1,{"cache_control":null}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		out := wire.Normalize([]byte(s))
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("wire.Normalize(%s) = %s: not JSON: %v", s, out, err)
		}
		if tc := wire.TextContent(out); !json.Valid(tc) {
			t.Fatalf("wire.TextContent(%s) = %s: not JSON", out, tc)
		}
		if bytes.Contains(out, wire.CacheControlKey) && !bytes.Contains([]byte(s), []byte(`\"cache_control`)) {
			// A key left behind is a bug; the text inside a string may
			// keep it.
			var m any
			_ = json.Unmarshal(out, &m)
			if hasKey(m, "cache_control") {
				t.Fatalf("wire.Normalize(%s) kept the key: %s", s, out)
			}
		}
	})
}

func hasKey(v any, key string) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == key || hasKey(e, key) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasKey(e, key) {
				return true
			}
		}
	}
	return false
}

// FuzzParseRequest checks the hand-written scanner against encoding/json
// on valid bodies: the same messages, byte for byte, and the same model;
// and that the bytes around messages are the client's.
func FuzzParseRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	f.Add(" { \"messages\" : [ {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a]}\\\"\"}]} , 1 ] , \"m\\u006fdel\":\"x\" } ")
	f.Add(`{"system":[{"type":"text","text":"{"}],"messages":[[],{},"s",null,-1.5e3,true]}`)
	f.Fuzz(func(t *testing.T, s string) {
		var ref struct {
			Model    *string           `json:"model"`
			Messages []json.RawMessage `json:"messages"`
		}
		if json.Unmarshal([]byte(s), &ref) != nil || len(ref.Messages) == 0 {
			return
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &keys) != nil || keys["messages"] == nil {
			return // encoding/json matches keys case-insensitively; the API does not
		}
		if _, ok := keys["model"]; !ok {
			ref.Model = nil
		}
		if bytes.Count([]byte(s), []byte(`"messages"`)) > 1 || (ref.Model == nil && bytes.Contains([]byte(s), []byte(`"model"`))) {
			return // duplicate keys, or a model key inside a value: encoding/json keeps the last
		}
		r, err := parseRequest([]byte(s))
		if err != nil {
			t.Fatalf("parseRequest(%s): %v", s, err)
		}
		if len(r.Messages) != len(ref.Messages) {
			t.Fatalf("%d messages, want %d", len(r.Messages), len(ref.Messages))
		}
		for i := range ref.Messages {
			var a, b any
			_ = json.Unmarshal(r.Messages[i], &a)
			_ = json.Unmarshal(ref.Messages[i], &b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("message %d = %s, want %s", i, r.Messages[i], ref.Messages[i])
			}
		}
		if ref.Model != nil && r.Model != *ref.Model {
			t.Fatalf("model %q, want %q", r.Model, *ref.Model)
		}
		if got := string(wire.SpliceItems(r.body, r.MsgStart, r.MsgEnd, []byte(s[r.MsgStart:r.MsgEnd]))); got != s {
			t.Fatalf("splice changed the body: %s", got)
		}
	})
}

// TestHeaderSafeIsASCII: a Ctxd-Diagnostic value is ASCII (clients decode
// header bytes as Latin-1), at most 500 bytes.
func TestHeaderSafeIsASCII(t *testing.T) {
	got := headerSafe("fixed prefix 9000 tokens ≥ threshold 7000\nnext: é" + strings.Repeat("x", 600))
	if !strings.HasPrefix(got, "fixed prefix 9000 tokens >= threshold 7000 next: ?") || len(got) != 500 {
		t.Fatalf("%q", got[:60])
	}
	for i := 0; i < len(got); i++ {
		if got[i] >= 0x7f || got[i] < 0x20 {
			t.Fatalf("byte %d is %#x", i, got[i])
		}
	}
}

func TestTextContent(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"role":"user","content":[{"type":"text","text":"a \"b\""}]}`, `{"role":"user","content":"a \"b\""}`},
		{`{"role":"user","content":[ {"text":"a","type":"text"} ]}`, `{"role":"user","content":"a"}`},
		{`{"content":[{"type":"text","text":"a"}],"role":"user"}`, `{"content":"a","role":"user"}`},
		{`{"role":"user","content":"a"}`, `{"role":"user","content":"a"}`},
		// Anything but one bare text block stays as it is.
		{`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, ``},
		{`{"role":"user","content":[{"type":"text","text":"a","citations":[]}]}`, ``},
		{`{"role":"user","content":[{"text":"a"}]}`, ``},
		{`{"role":"user","content":[{"type":"image","text":"a"}]}`, ``},
		{`{"role":"user","content":[{"type":"text","text":null}]}`, ``},
		{`{"role":"user","content":[]}`, ``},
	} {
		want := c.want
		if want == "" {
			want = c.in
		}
		if got := string(wire.TextContent([]byte(c.in))); got != want {
			t.Errorf("wire.TextContent(%s) = %s, want %s", c.in, got, want)
		}
	}
}

// TestStringAndTextBlockSameBranch: a client that sends a user message as
// a string in one request and as one text block in the next (Claude Code
// does, and its moving cache marker turns the string into a block) stays
// on its branch: no new branch, each request one more turn of the same
// session (string content and one text block match).
func TestStringAndTextBlockSameBranch(t *testing.T) {
	f := newFixture(t, testConfig())
	const head = `{"model":"claude-opus-4-8","max_tokens":1000,"stream":true,"metadata":{"user_id":"{\"session_id\":\"aaaaaaaa-2222-3333-4444-555555555555\"}"},"messages":[`
	first := `{"role":"user","content":"fix the bug"}`
	firstBlock := `{"role":"user","content":[{"type":"text","text":"fix the bug"}]}`
	ans1 := assistantText("which bug?")
	f.up.script(textAnswer("which bug?"))
	resp, _ := f.post(head+first+`]}`, nil)
	id := resp.Header.Get(HeaderSessionID)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("status %d, session %q", resp.StatusCode, id)
	}
	// The first message now as a block, the next prompt with the marker.
	f.up.script(textAnswer("on it"))
	resp, _ = f.post(head+firstBlock+`,`+ans1+`,{"role":"user","content":[{"type":"text","text":"the flaky one","cache_control":{"type":"ephemeral"}}]}]}`, nil)
	if got := resp.Header.Get(HeaderSessionID); got != id {
		t.Fatalf("second request on session %s, want %s", got, id)
	}
	// And back: the block as a string again, the second prompt a string.
	resp, _ = f.post(head+first+`,`+ans1+`,{"role":"user","content":"the flaky one"},`+assistantText("on it")+`,{"role":"user","content":"thanks"}]}`, nil)
	if got := resp.Header.Get(HeaderSessionID); got != id {
		t.Fatalf("third request on session %s, want %s", got, id)
	}
	f.settle()
	if b := f.p.Stats().Branches; b != 0 {
		t.Errorf("%d branches recorded, want 0", b)
	}
	// 3 prompts and 3 answers, each once.
	if n := messageEvents(t, f, id); n != 6 {
		t.Errorf("%d messages recorded, want 6", n)
	}
}

// Document blocks and text citations pass through byte-identical on every
// managed request while ctxd has not rewritten their message; so do the
// client's own key order and spacing (they used to be turned into
// text and dropped).
func TestUnrewrittenMessagesPassThroughByteIdentical(t *testing.T) {
	f := newFixture(t, testConfig())
	doc := `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"The grass is green."},"title":"facts","citations":{"enabled":true}}`
	cited := `{"type":"text","text":"ok","citations":[{"type":"char_location","cited_text":"The grass is green.","document_index":0,"document_title":"facts","start_char_index":0,"end_char_index":19}]}`
	first := `{"role":"user","content":[` + doc + `,{"type":"text","text":"What colour is the grass?"}]}`
	spaced := `{ "role": "user", "content": [ {"text": "and the sky?", "type": "text"}, {"type": "text", "text": "be brief"}]}`
	c := newConversation()
	c.msgs = []string{first}
	f.post(c.body(), nil)
	c.assistant(`{"role":"assistant","content":[` + cited + `]}`)
	c.msgs = append(c.msgs, spaced)
	f.post(c.body(), nil)
	c.assistant(assistantText("ok")).user("thanks")
	f.post(c.body(), nil)
	// And after a restart (nothing of it in memory).
	f.restart()
	c.assistant(assistantText("ok")).user("bye")
	f.post(c.body(), nil)
	reqs := f.up.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for i, r := range reqs {
		if !bytes.Contains(r.body, []byte(doc)) {
			t.Errorf("request %d: the document block is not the client's:\n%s", i, r.body)
		}
		if i > 0 && !bytes.Contains(r.body, []byte(cited)) || i > 1 && !bytes.Contains(r.body, []byte(spaced)) {
			t.Errorf("request %d: the cited answer or the client's spacing changed:\n%s", i, r.body)
		}
	}
	// The outgoing messages are the client's, byte for byte (markers
	// normalized): ctxd rewrote nothing.
	last := reqs[3].body
	if got, want := normalizedMessages(t, last), normalizedMessages(t, []byte(c.body())); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("outgoing messages differ from the client's:\n%v\n%v", got, want)
	}
}

func TestPlainText(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{
		{`{"role":"user","content":"a"}`, true},
		{`{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}`, true},
		{`{"role":"user","content":[{"type":"text","text":"a","citations":[]}]}`, false},
		{`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, false},
		{`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}`, false},
	} {
		if got := wire.PlainText([]byte(c.in)); got != c.want {
			t.Errorf("wire.PlainText(%s) = %v, want %v", c.in, got, c.want)
		}
	}
}

// wire.ChainsWith, reusing the digests of the previous request's messages,
// gives the chains of the full computation as requests grow, markers move
// and a message is edited in place (the links of the unchanged prefix
// reused, the rest recomputed); its marker bits are hasMarker's.
func TestChainsWithReuse(t *testing.T) {
	var c wire.Digests
	conv := newConversation().user("one")
	for i := 0; i < 6; i++ {
		conv.assistant(assistantText(fmt.Sprintf("answer %d", i))).user(fmt.Sprintf("prompt %d", i))
		r, err := parseRequest([]byte(conv.body()))
		if err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			r.Messages[1] = json.RawMessage(assistantText("edited"))
		}
		got, want := wire.ChainsWith(&c, r.Messages, dialectAnthropic.MatchKey), wire.Chains(r.Messages, dialectAnthropic.MatchKey)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("request %d: chains differ", i)
		}
		// The marker bits kept with the digests (which encode reads
		// instead of searching each message) are hasMarker's.
		n := 0
		for k, m := range r.Messages {
			if c.Marked[k] != wire.HasMarker(m) {
				t.Fatalf("request %d, message %d: marked %v, hasMarker %v", i, k, c.Marked[k], wire.HasMarker(m))
			}
			if c.Marked[k] {
				n++
			}
		}
		if n == 0 {
			t.Fatalf("request %d: no message carries a marker; the test shows nothing", i)
		}
	}
}

// parseRequest reads body, a Messages API request (parseBody).
func parseRequest(body []byte) (*request, error) { return parseBody(body, dialectAnthropic) }
