package wire_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai/responses"
)

// A request that continues a conversation the provider keeps names the
// member it does it by; a null conversation continues none.
func TestServerState(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","input":"hi"}`, ""},
		{`{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id"},
		{`{"model":"m","input":"hi","conversation":"conv_1"}`, "conversation"},
		{`{"model":"m","input":"hi","conversation":null}`, ""},
		{`{"model":"m","input":"hi","conversation":{"id":"conv_1"},"previous_response_id":"resp_1"}`, "previous_response_id"},
	} {
		r, err := wire.Scan([]byte(tc.body), responses.Dialect{})
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got := r.ServerState(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}

// The scan counts the conversation's content blocks as it splits it: the
// elements of each item's content array, one for an item without one
// (proxy.limits.content_blocks).
func TestScanCountsContentBlocks(t *testing.T) {
	for _, tc := range []struct {
		body string
		want uint64
	}{
		{`{"model":"m","input":"hi"}`, 1},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image"}]},{"type":"function_call","name":"f"},{"role":"user","content":"b"}]}`, 4},
		{`{"model":"m","input":[{"role":"user","con\u0074ent":[1,2,3]},{"role":"user","content":[]}]}`, 3},
	} {
		r, err := wire.Scan([]byte(tc.body), responses.Dialect{})
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if r.Blocks != tc.want {
			t.Errorf("%s: %d blocks, want %d", tc.body, r.Blocks, tc.want)
		}
	}
}

// With the marker flags of the request's hashes (Digests.Marked), a
// message is normalized, told plain and hashed as without them, where
// they are not known too.
func TestMarkedFlagsAsSearched(t *testing.T) {
	msgs := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"plain"}`),
		json.RawMessage(`{"role":"user","content":[{"type":"text","text":"plain","cache_control":{"type":"ephemeral"}}]}`),
		json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x","cache_control":{"type":"ephemeral"}}]}`),
		json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"a \"cache_control\" in text"}]}`),
	}
	var d wire.Digests
	wire.ChainsWith(&d, msgs, nil)
	for k, m := range msgs {
		for _, marked := range [][]bool{d.Marked, nil} {
			if got, want := wire.NormalizeMarked(m, marked, k), wire.Normalize(m); !bytes.Equal(got, want) {
				t.Errorf("message %d: NormalizeMarked %s, Normalize %s", k, got, want)
			}
			if got, want := wire.PlainTextMarked(m, marked, k), wire.PlainText(m); got != want {
				t.Errorf("message %d: PlainTextMarked %v, PlainText %v", k, got, want)
			}
		}
	}
	// A flag says what the search would find: a message flagged unmarked
	// is taken as it is.
	if got := wire.NormalizeMarked(msgs[1], []bool{false, false}, 1); !bytes.Equal(got, msgs[1]) {
		t.Errorf("a message flagged unmarked was searched: %s", got)
	}
}

// The prefix hash covers the system bytes and the prefix items, each
// kept apart (moving a byte across a boundary changes it), and nothing of
// the conversation after the prefix; the tools hash covers the tools.
func TestPrefixAndToolsHash(t *testing.T) {
	req := func(system string, prefix int, items ...string) *wire.Request {
		r := &wire.Request{System: json.RawMessage(system), Prefix: prefix, Tools: json.RawMessage(system)}
		for _, it := range items {
			r.Messages = append(r.Messages, json.RawMessage(it))
		}
		return r
	}
	base := req(`"ab"`, 1, `"c"`, `"d"`).PrefixHash()
	if got := req(`"ab"`, 1, `"c"`, `"other"`).PrefixHash(); got != base {
		t.Error("a message after the prefix changed the prefix hash")
	}
	for name, r := range map[string]*wire.Request{
		"system":        req(`"ax"`, 1, `"c"`, `"d"`),
		"prefix item":   req(`"ab"`, 1, `"x"`, `"d"`),
		"longer prefix": req(`"ab"`, 2, `"c"`, `"d"`),
		"an empty item": req(`"ab"`, 2, `"c"`, ``, `"d"`),
	} {
		if r.PrefixHash() == base {
			t.Errorf("%s: the prefix hash did not change", name)
		}
	}
	if req(`[1]`, 0).ToolsHash() == req(`[2]`, 0).ToolsHash() || req(`[1]`, 0).ToolsHash() != req(`[1]`, 0).ToolsHash() {
		t.Error("the tools hash does not follow the tools bytes")
	}
}

// What a conversation's digests hold grows with its messages: at least a
// SHA-256 and a chain link for each.
func TestDigestsBytes(t *testing.T) {
	var one, ten wire.Digests
	msgs := make([]json.RawMessage, 10)
	for i := range msgs {
		msgs[i] = json.RawMessage(`{"role":"user","content":"m` + string(rune('0'+i)) + `"}`)
	}
	wire.ChainsWith(&one, msgs[:1], nil)
	wire.ChainsWith(&ten, msgs, nil)
	if one.Bytes() < 2*wire.SizeDigest || ten.Bytes() < 10*2*wire.SizeDigest || ten.Bytes() <= one.Bytes() {
		t.Fatalf("digests of 1 message: %d bytes, of 10: %d", one.Bytes(), ten.Bytes())
	}
}

// Two conversations' chains tell how many leading messages they share.
func TestShared(t *testing.T) {
	msgs := []json.RawMessage{[]byte(`{"role":"user","content":"a"}`), []byte(`{"role":"assistant","content":"b"}`), []byte(`{"role":"user","content":"c"}`)}
	other := []json.RawMessage{msgs[0], msgs[1], []byte(`{"role":"user","content":"d"}`)}
	a, b := wire.Chains(msgs, nil), wire.Chains(other, nil)
	for _, c := range []struct {
		x, y []wire.Digest
		want int
	}{{a, b, 2}, {a, a, 3}, {a, b[:2], 1}, {a, nil, 0}, {a[:1], b, 0}} {
		if got := wire.Shared(c.x, c.y); got != c.want {
			t.Errorf("Shared = %d, want %d", got, c.want)
		}
	}
}
