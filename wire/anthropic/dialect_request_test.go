package anthropic

import (
	"net/http"
	"testing"
)

// WithBeta adds a beta to the client's anthropic-beta list once, keeping
// the client's; LongContextBeta finds the 1M window's beta in any list.
func TestBetaHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		have []string
		want string
	}{
		{"none", nil, "b2"},
		{"the client's", []string{"a1, a2"}, "a1,a2,b2"},
		{"already there", []string{"a1,b2"}, "a1,b2"},
		{"already in a second header line: unchanged", []string{"a1", " b2 "}, "a1"},
	} {
		h := http.Header{}
		for _, v := range tc.have {
			h.Add("Anthropic-Beta", v)
		}
		WithBeta(h, "b2")
		if got := h.Get("Anthropic-Beta"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if !LongContextBeta(http.Header{"Anthropic-Beta": {"a1", "x, context-1m-2025-08-07"}}) || LongContextBeta(http.Header{"Anthropic-Beta": {"context-2m"}}) {
		t.Fatal("LongContextBeta misread the header")
	}
}

// An Anthropic key or OAuth token in Authorization is Anthropic's; an
// OpenAI bearer token is not.
func TestOwnToken(t *testing.T) {
	for auth, want := range map[string]bool{
		"Bearer sk-ant-oat01-abc": true,
		" bearer  sk-ant-api03-x": true,
		"Bearer sk-proj-abc":      false,
		"sk-ant-api03-x":          false,
		"":                        false,
	} {
		if got := OwnToken(auth); got != want {
			t.Errorf("OwnToken(%q) = %v, want %v", auth, got, want)
		}
	}
}

// A request is Anthropic's by its path, by one of its API's headers or by
// an Anthropic key or token as a bearer; a plain bearer is not.
func TestOwnRequest(t *testing.T) {
	for _, tc := range []struct {
		path string
		hdr  map[string]string
		want bool
	}{
		{"/v1/messages/count_tokens", nil, true},
		{"/api/oauth/usage", nil, true},
		{"/v1/models", map[string]string{"Anthropic-Version": "2023-06-01"}, true},
		{"/v1/models", map[string]string{"Anthropic-Beta": "x"}, true},
		{"/v1/models", map[string]string{"X-Api-Key": "k"}, true},
		{"/v1/models", map[string]string{"Authorization": "Bearer sk-ant-oat01-x"}, true},
		{"/v1/models", map[string]string{"Authorization": "Bearer sk-proj-x"}, false},
		{"/", nil, false},
	} {
		r, _ := http.NewRequest("GET", "http://127.0.0.1"+tc.path, nil)
		for k, v := range tc.hdr {
			r.Header.Set(k, v)
		}
		if got := OwnRequest(r); got != tc.want {
			t.Errorf("%s %v: %v, want %v", tc.path, tc.hdr, got, tc.want)
		}
	}
}
