package wire_test

import (
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
