package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/api"
)

// recallSession creates session s1 with a system prompt that states its
// working directory, appends a tool round whose result is offloaded, and
// compacts it away.
func recallSession(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.client.CreateSession(ctx, api.CreateSessionRequest{ID: "s1", Model: "claude-sonnet-4-5", ContextLimit: 20000,
		System: "You are an agent.\n<env>\nWorking directory: /home/dev/proj\n</env>"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("filler line of build output\n", 1000) + "panic: nil map in LoadWidgetConfig\n" + strings.Repeat("more output\n", 1000)
	call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "Bash", Input: json.RawMessage(`{"command":"go test ./widget/"}`)}}}
	res := api.Message{Role: api.RoleTool, ToolCallID: "c1", ToolName: "Bash", Content: []api.Block{{Type: api.BlockText, Text: big}}}
	msgs := []api.Message{text(api.RoleUser, "Make the widget tests pass; the zebra flag must stay."), call, res,
		text(api.RoleAssistant, "The widget config loader panics. "+strings.Repeat("word ", 6000)),
		text(api.RoleUser, "go on"), text(api.RoleAssistant, "ok")}
	if _, err := f.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	if out, err := f.client.Compact(ctx, "s1", api.CompactRequest{Wait: true}); err != nil || out.Checkpoint == nil {
		t.Fatalf("compact: %+v %v", out, err)
	}
}

// GET /v1/sessions/{id}/search finds compacted messages, the whole text of
// offloaded results and summaries, with their seq, tool and artifact, in
// pages; the session's working directory comes with it.
func TestSearchFindsCompactedAndOffloadedText(t *testing.T) {
	f := newFixture(t, nil)
	recallSession(t, f)
	ctx := context.Background()

	r, err := f.client.Search(ctx, "s1", "ZEBRA flag", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.WorkingDir != "/home/dev/proj" {
		t.Errorf("working dir %q", r.WorkingDir)
	}
	var msgHit *api.SearchHit
	for i, h := range r.Hits {
		if h.Source == api.SearchMessage {
			msgHit = &r.Hits[i]
		}
	}
	if msgHit == nil || msgHit.Role != "user" || !strings.Contains(msgHit.Text, "the zebra flag must stay") {
		t.Fatalf("no hit in the compacted user message: %+v", r.Hits)
	}

	r, err = f.client.Search(ctx, "s1", "nil map in LoadWidgetConfig", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 1 || len(r.Hits) != 1 {
		t.Fatalf("hits %+v (total %d), want the one line of the offloaded result", r.Hits, r.Total)
	}
	h := r.Hits[0]
	if h.Source != api.SearchOffloaded || h.Tool != "Bash" || h.ToolCallID != "c1" || !strings.HasPrefix(h.Artifact, api.ArtifactScheme) || h.Line != 1001 {
		t.Fatalf("offloaded hit %+v", h)
	}
	whole, err := f.client.Artifact(ctx, h.Artifact)
	if err != nil || !strings.Contains(string(whole), "panic: nil map") {
		t.Fatalf("the hit's artifact: %v", err)
	}
	// The hit's seq is the tool message's: reading it shows the stub.
	page, err := f.client.ReadMessages(ctx, "s1", api.ReadMessagesRequest{From: h.Seq, To: h.Seq})
	if err != nil || !strings.Contains(page.Text, "· tool result · Bash · call c1") {
		t.Fatalf("read seq %d: %+v %v", h.Seq, page, err)
	}

	// Summaries are searched too.
	if r, err = f.client.Search(ctx, "s1", "Full history", 0, 0); err != nil || len(r.Hits) == 0 || r.Hits[0].Source != api.SearchSummary {
		t.Fatalf("summary hits %+v %v", r, err)
	}

	// Pages: the 1000 lines of the offloaded text and those of its stub.
	all, err := f.client.Search(ctx, "s1", "filler line", 100, 0)
	if err != nil || all.Total <= 1000 || len(all.Hits) != 100 || all.Next != 100 {
		t.Fatalf("page 1: total %d, %d hits, next %d, %v", all.Total, len(all.Hits), all.Next, err)
	}
	last, err := f.client.Search(ctx, "s1", "filler line", 100, all.Total-50)
	if err != nil || len(last.Hits) != 50 || last.Next != 0 {
		t.Fatalf("last page: %d hits, next %d, %v", len(last.Hits), last.Next, err)
	}
}

// GET /v1/sessions/{id}/messages renders a seq range, compacted or not, in
// pages of characters.
func TestReadMessagesPages(t *testing.T) {
	f := newFixture(t, nil)
	recallSession(t, f)
	ctx := context.Background()
	whole, err := f.client.ReadMessages(ctx, "s1", api.ReadMessagesRequest{MaxChars: 200000})
	if err != nil {
		t.Fatal(err)
	}
	if whole.From != 1 || whole.To == 0 || whole.Next != 0 || !strings.HasPrefix(whole.Text, "=== seq 1 · user") || !strings.Contains(whole.Text, "=== seq ") {
		t.Fatalf("whole: from %d to %d next %d text %.80q", whole.From, whole.To, whole.Next, whole.Text)
	}
	var got strings.Builder
	off := 0
	for n := 0; ; n++ {
		p, err := f.client.ReadMessages(ctx, "s1", api.ReadMessagesRequest{Offset: off, MaxChars: 7000})
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(p.Text)
		if p.Next == 0 {
			break
		}
		if p.Next <= off || n > 100 {
			t.Fatalf("page at %d: next %d", off, p.Next)
		}
		off = p.Next
	}
	if got.String() != whole.Text {
		t.Fatalf("pages joined (%d bytes) differ from the whole (%d bytes)", got.Len(), len(whole.Text))
	}
}

// Bad queries are refused naming the field; an unknown session is 404.
func TestSearchRefusals(t *testing.T) {
	f := newFixture(t, nil)
	recallSession(t, f)
	for _, tc := range []struct{ path, field string }{
		{"/v1/sessions/s1/search", "q"},
		{"/v1/sessions/s1/search?q=%20%20", "q"},
		{"/v1/sessions/s1/search?q=" + strings.Repeat("x", 501), "q"},
		{"/v1/sessions/s1/search?q=x&limit=0", "limit"},
		{"/v1/sessions/s1/search?q=x&limit=101", "limit"},
		{"/v1/sessions/s1/search?q=x&offset=-1", "offset"},
		{"/v1/sessions/s1/messages?from=x", "from"},
		{"/v1/sessions/s1/messages?from=5&to=2", "to"},
		{"/v1/sessions/s1/messages?max_chars=200001", "max_chars"},
	} {
		status, e, _, _ := f.do(t, "GET", tc.path, "", nil)
		if status != 400 || e == nil || e.Field != tc.field {
			t.Errorf("%s: status %d, error %+v; want 400 on %s", tc.path, status, e, tc.field)
		}
	}
	if status, _, _, _ := f.do(t, "GET", "/v1/sessions/nope/search?q=x", "", nil); status != 404 {
		t.Errorf("unknown session: %d", status)
	}
}
