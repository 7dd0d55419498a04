package server

// Fuzz targets of every request a client controls: the bodies of
// create, patch, append, compact and run, the query parameters of context
// and events, and Last-Event-ID. The property: the answer is never a 5xx
// (bad input is the client's fault, answered 4xx with the envelope) and a
// refused request stores nothing. Seeds are the table tests' bodies.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// fuzzRoutes are the routes with a body; the fuzzer picks one by index.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/v1/sessions"},
	{"PATCH", "/v1/sessions/s1"},
	{"POST", "/v1/sessions/s1/messages"},
	{"POST", "/v1/sessions/s1/compact"},
	{"POST", "/v1/sessions/s1/runs"},
}

func fuzzBodySeeds(f *testing.F) {
	for _, s := range []struct {
		route int
		body  string
	}{
		{0, `{"id":"s9","model":"gpt-4o","system":"be brief","tools":[{"name":"bash","input_schema":{"type":"object"}}],"labels":{"a":"b"}}`},
		{0, `{"model":"mystery"}`},
		{0, `{"id":"s8","model":"x","context_limit":5000,"config":"[offload]\nmax_chars = 100\n"}`},
		{0, `{"model":"gpt-4o","model":"o3"}`},
		{1, `{"system":"new","tools":[],"pinned":[{"type":"text","text":"pin"}]}`},
		{1, `{"model":"gpt-4o","context_limit":8000}`},
		{1, `{"tools":{"name":"x"}}`},
		{2, `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
		{2, `{"messages":[{"role":"assistant","content":[{"type":"tool_call","id":"c1","name":"bash","input":{"cmd":"ls"}}],"usage":{"input_tokens":10}}]}`},
		{2, `{"messages":[{"role":"tool","tool_call_id":"c1","tool_name":"bash","content":[{"type":"text","text":"out"}]}]}`},
		{2, `{"messages":[{"role":"user","content":[{"type":"text","text":"\ud800"}]}]}`},
		{2, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}]}]}"},
		{2, `{"messages":[{"role":"user","role":"assistant","content":[]}]}`},
		{2, `{"messages":[{"Role":"user","content":[]}]}`},
		{2, `{"messages":[{"role":"user","content":[],"time":"yesterday"}]}`},
		{2, `{"messages":[{"role":"user","content":[{"type":"image","media_type":"image/png","data":"iVBORw0KGgo="}]}]}`},
		{3, `{"reason":"manual","wait":true}`},
		{3, `{"reason":"overflow"}`},
		{3, ``},
		{4, `{}`},
		{4, `[1]`},
	} {
		f.Add(uint8(s.route), []byte(s.body))
	}
}

// FuzzRequestBodies: any body on any route is answered below 500 with the
// envelope on errors, and a refused one changes nothing.
func FuzzRequestBodies(f *testing.F) {
	fuzzBodySeeds(f)
	fx := newFixture(f, nil)
	fx.create(f, "s1")
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		before := fx.lastSeq(t, "s1")
		sessionsBefore := fx.sessions(t)
		req, err := http.NewRequest(r.method, fx.ts.URL+r.path, strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", api.ContentTypeJSON)
		resp, err := fx.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, resp.StatusCode, b)
		}
		if resp.StatusCode >= 400 {
			var env api.ErrorEnvelope
			if err := json.Unmarshal(b, &env); err != nil || env.Error == nil || env.Error.Code == "" {
				t.Fatalf("%d without the envelope: %s", resp.StatusCode, b)
			}
			if got := fx.lastSeq(t, "s1"); got != before {
				t.Fatalf("a refused %s %s changed s1: last_seq %d → %d (%s)", r.method, r.path, before, got, b)
			}
			if got := fx.sessions(t); got != sessionsBefore {
				t.Fatalf("a refused %s %s changed the session count %d → %d", r.method, r.path, sessionsBefore, got)
			}
		}
	})
}

// FuzzQueryAndLastEventID: any format, presend, from and Last-Event-ID
// value is answered below 500: 400 naming the parameter, or the answer.
func FuzzQueryAndLastEventID(f *testing.F) {
	for _, s := range [][4]string{
		{"anthropic", "true", "1", ""},
		{"openai", "0", "", "3"},
		{"xml", "maybe", "-1", "x"},
		{"", "", "18446744073709551615", "18446744073709551615"},
		{"canonical", "1", "99999999999999999999", "-5"},
		{"\x00", "TRUE", " 1", "1 "},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	fx := newFixture(f, nil)
	fx.create(f, "s1")
	if _, err := fx.client.AppendMessages(context.Background(), "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "hi")}}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, format, presend, from, lastEventID string) {
		q := url.Values{}
		if format != "" {
			q.Set(api.QueryFormat, format)
		}
		if presend != "" {
			q.Set(api.QueryPreSend, presend)
		}
		get := func(path string, hdr map[string]string) {
			req, err := http.NewRequest("GET", fx.ts.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := fx.ts.Client().Do(req)
			if err != nil {
				// A header value net/http refuses to send (a control
				// character) never reaches the server.
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				t.Fatalf("GET %s %v: %d %s", path, hdr, resp.StatusCode, b)
			}
		}
		get("/v1/sessions/s1/context?"+q.Encode(), nil)
		eq := url.Values{}
		if from != "" {
			eq.Set(api.QueryFrom, from)
		}
		hdr := map[string]string{}
		if lastEventID != "" {
			hdr[api.HeaderLastEventID] = lastEventID
		}
		get("/v1/sessions/s1/events?"+eq.Encode(), hdr)
	})
}

// sessions is the number of sessions the daemon lists.
func (f *fixture) sessions(t testing.TB) int {
	t.Helper()
	ss, err := f.client.ListSessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(ss)
}
