package server

// Daemon hardening: a null body, a malformed time, an absurd usage count,
// Updated on append and PATCH. Each test failed before its fix.

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// TestNullBodyIsRefused: a JSON null was decoded as {} (a PATCH that
// changed nothing answered 200, a compaction ran); every route with a body
// refuses it with 400 naming the request body, and nothing is stored.
func TestNullBodyIsRefused(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	before := f.lastSeq(t, "s1")
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/sessions"},
		{"PATCH", "/v1/sessions/s1"},
		{"POST", "/v1/sessions/s1/runs"},
		{"POST", "/v1/sessions/s1/messages"},
		{"POST", "/v1/sessions/s1/compact"},
	} {
		for _, body := range []string{"null", " null\n"} {
			status, ae, raw, _ := f.do(t, c.method, c.path, body, nil)
			if status != http.StatusBadRequest || ae == nil || ae.Code != api.Invalid {
				t.Errorf("%s %s %q: got %d %s, want 400 invalid", c.method, c.path, body, status, raw)
				continue
			}
			if !strings.HasPrefix(ae.Message, "request body: null is not a JSON object") {
				t.Errorf("%s %s: message %q does not name the body", c.method, c.path, ae.Message)
			}
		}
	}
	if got := f.lastSeq(t, "s1"); got != before {
		t.Errorf("last_seq %d after null bodies, want %d", got, before)
	}
	list, err := f.client.ListSessions(context.Background())
	if err != nil || len(list) != 1 {
		t.Errorf("sessions after a null create: %d, %v; want only s1", len(list), err)
	}
}

// TestBadTimeSaysWhy: "9999-99-99" was answered "not a string"; the
// message now quotes the value and the parser's reason, naming the field.
func TestBadTimeSaysWhy(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	msg := func(tm string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"a"}],"time":` + tm + `}]}`
	}
	for _, c := range []struct {
		name, time string
		want       []string
	}{
		{"month out of range", `"9999-99-99"`, []string{`"9999-99-99" is not one`, "month out of range"}},
		{"hour out of range", `"2026-01-02T25:04:05Z"`, []string{"hour out of range"}},
		{"not a time", `"yesterday"`, []string{`"yesterday" is not one`, "not in that form"}},
		{"a number", `7`, []string{"not a number"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, ae, raw, _ := f.do(t, "POST", "/v1/sessions/s1/messages", msg(c.time), nil)
			if status != http.StatusBadRequest || ae == nil || ae.Field != "messages[0].time" {
				t.Fatalf("got %d %s, want 400 on messages[0].time", status, raw)
			}
			for _, w := range append(c.want, "messages[0].time", "RFC 3339") {
				if !strings.Contains(ae.Message, w) {
					t.Errorf("message %q lacks %q", ae.Message, w)
				}
			}
			if strings.Contains(ae.Message, "not a string") {
				t.Errorf("message %q says the string is not a string", ae.Message)
			}
		})
	}
	if got := f.lastSeq(t, "s1"); got != 0 {
		t.Errorf("last_seq %d after refused appends, want 0", got)
	}
}

// TestAbsurdUsageIsRefused: usage counts near 2^64 wrapped in the
// post-check's sum (reported tokens 18446744073709551614); a count above
// history.MaxUsageTokens is a 400 naming the field, nothing stored.
func TestAbsurdUsageIsRefused(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "s1")
	for _, field := range []string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"} {
		body := `{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b"}],"usage":{"` + field + `":18446744073709551615}}]}`
		status, ae, raw, _ := f.do(t, "POST", "/v1/sessions/s1/messages", body, nil)
		want := "messages[1].usage." + field
		if status != http.StatusBadRequest || ae == nil || ae.Field != want || !strings.Contains(ae.Message, want) {
			t.Errorf("%s: got %d %s, want 400 naming %s", field, status, raw, want)
		}
	}
	if got := f.lastSeq(t, "s1"); got != 0 {
		t.Errorf("last_seq %d after refused appends, want 0", got)
	}
	// At the bound the sum is exact.
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":"text","text":"b"}],"usage":{"input_tokens":1000000000,"output_tokens":1000000000}}]}`
	status, _, raw, _ := f.do(t, "POST", "/v1/sessions/s1/messages", body, nil)
	if status != http.StatusOK || !strings.Contains(string(raw), `"tokens":{"value":2000000000,"source":"reported"}`) {
		t.Errorf("usage at the bound: got %d %s, want 200 with 2000000000 reported tokens", status, raw)
	}
}

// TestUpdatedMovesOnAppendAndPatch: a session's updated time stayed at its
// creation through appends and PATCHes.
func TestUpdatedMovesOnAppendAndPatch(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.create(t, "s1")
	s0, err := f.client.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "hi")}}); err != nil {
		t.Fatal(err)
	}
	s1, err := f.client.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !s1.Updated.After(s0.Updated) {
		t.Errorf("append: updated %v, not after %v", s1.Updated, s0.Updated)
	}
	system := "be brief"
	if _, err := f.client.PatchSession(ctx, "s1", api.PatchSessionRequest{System: &system}); err != nil {
		t.Fatal(err)
	}
	s2, err := f.client.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Updated.After(s1.Updated) {
		t.Errorf("PATCH: updated %v, not after %v", s2.Updated, s1.Updated)
	}
	list, err := f.client.ListSessions(ctx)
	if err != nil || len(list) != 1 || !list[0].Updated.Equal(s2.Updated) {
		t.Errorf("listing: %+v, %v; want updated %v", list, err, s2.Updated)
	}
	// A read changes nothing.
	if s3, err := f.client.GetSession(ctx, "s1"); err != nil || !s3.Updated.Equal(s2.Updated) {
		t.Errorf("read: updated %v, %v; want %v", s3.Updated, err, s2.Updated)
	}
}
