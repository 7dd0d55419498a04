package openai

import (
	"net/http"
	"testing"
)

// A request is OpenAI's by one of its API's paths or by a bearer token.
func TestOwnRequest(t *testing.T) {
	for _, tc := range []struct {
		path, auth string
		want       bool
	}{
		{"/v1/responses/resp_1", "", true},
		{"/v1/chat/completions", "", true},
		{"/v1/completions", "", true},
		{"/v1/embeddings", "", true},
		{"/v1/models", "bearer sk-x", true},
		{"/v1/models", "Basic eA==", false},
		{"/v1/messages", "", false},
	} {
		r, _ := http.NewRequest("GET", "http://127.0.0.1"+tc.path, nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		if got := OwnRequest(r); got != tc.want {
			t.Errorf("%s %q: %v, want %v", tc.path, tc.auth, got, tc.want)
		}
	}
}
