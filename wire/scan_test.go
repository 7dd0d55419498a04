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
