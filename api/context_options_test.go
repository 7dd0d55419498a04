package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestContextPathWith(t *testing.T) {
	cases := []struct {
		opt  ContextOptions
		want string
	}{
		{ContextOptions{}, "/v1/sessions/s/context"},
		{ContextOptions{Format: FormatOpenAI}, "/v1/sessions/s/context?format=openai"},
		{ContextOptions{NoPreSend: true}, "/v1/sessions/s/context?presend=false"},
		{ContextOptions{Format: FormatAnthropic, NoPreSend: true}, "/v1/sessions/s/context?format=anthropic&presend=false"},
	}
	for _, c := range cases {
		if got := ContextPathWith("s", c.opt); got != c.want {
			t.Errorf("ContextPathWith(%+v) = %q, want %q", c.opt, got, c.want)
		}
	}
}

func TestClientContextWith(t *testing.T) {
	var query string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		w.Header().Set("Content-Type", ContentTypeJSON)
		_, _ = w.Write([]byte(`{"messages":[]}`))
	}))
	defer ts.Close()
	c := &Client{BaseURL: ts.URL}
	b, err := c.ContextWith(context.Background(), "s", ContextOptions{NoPreSend: true})
	if err != nil || string(b) != `{"messages":[]}` || query != "presend=false" {
		t.Fatalf("got %s %v, query %q", b, err, query)
	}
	if _, err := c.ContextWith(context.Background(), "", ContextOptions{}); ErrorCode(err) != Invalid {
		t.Fatalf("empty id: %v", err)
	}
}
