package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// socketPath returns a fresh socket path in t.TempDir(), or in a short
// directory under /tmp when that path nears the 104-byte limit of
// sun_path on some systems.
func socketPath(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ctxd.sock")
	if len(p) < 100 {
		return p
	}
	dir, err := os.MkdirTemp("/tmp", "ctxd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// serveUnix serves h on a unix socket and returns its path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	p := socketPath(t)
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

// seen is what the fake daemon recorded of the last request.
type seen struct {
	Pattern, Method, URI, Body string
	Header                     http.Header
}

// fakeDaemon registers every route of Routes() on a ServeMux, records each
// request and answers with the status and body set in reply.
type fakeDaemon struct {
	mu     sync.Mutex
	last   seen
	status int
	body   string
	ctype  string
}

func (f *fakeDaemon) reply(status int, ctype, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.ctype, f.body = status, ctype, body
	f.last = seen{}
}

func (f *fakeDaemon) request() seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeDaemon) mux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, route := range Routes() {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.last = seen{Pattern: r.Pattern, Method: r.Method, URI: r.RequestURI, Body: string(b), Header: r.Header.Clone()}
			status, ctype, body := f.status, f.ctype, f.body
			f.mu.Unlock()
			w.Header().Set(HeaderVersion, Version)
			if ctype != "" {
				w.Header().Set("Content-Type", ctype)
			}
			w.WriteHeader(status)
			io.WriteString(w, body)
		})
	}
	return mux
}

func TestClientMethods(t *testing.T) {
	f := &fakeDaemon{}
	c := &Client{Socket: serveUnix(t, f.mux())}
	ctx := context.Background()
	sys := "new system"
	limit := uint64(50000)

	sessionJSON := `{"id":"s1","model":"m","context_limit":200000,"threshold":140000,"auto":true,` +
		`"created":"2025-01-01T00:00:00Z","messages":3,"last_seq":5,"tokens":{"value":1000,"source":"estimated"},` +
		`"circuit":{"open":true,"failures":3},"compaction":"idle","open_tool_calls":1,"checkpoints":1,` +
		`"last_checkpoint":{"seq":4,"time":"2025-01-01T00:00:00Z","summary_bytes":10,"stalled":false,"snapshot_seq":3,` +
		`"first_retained_seq":2,"summarized_messages":1,"binding":"extractive","pruned_retry":false,"tokens_before":9,"tokens_after":3},` +
		`"system_digest":"ab","tools_digest":"cd","future_field":1}`
	wantSession := &Session{
		ID: "s1", Model: "m", ContextLimit: 200000, Threshold: 140000, Auto: true,
		Created: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Messages: 3, LastSeq: 5,
		Tokens: Tokens{1000, TokensEstimated}, Circuit: Circuit{Open: true, Failures: 3},
		Compaction: CompactionIdle, OpenToolCalls: 1, Checkpoints: 1,
		LastCheckpoint: &Checkpoint{Seq: 4, Time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), SummaryBytes: 10,
			SnapshotSeq: 3, FirstRetainedSeq: 2, SummarizedMessages: 1, Binding: "extractive", TokensBefore: 9, TokensAfter: 3},
		SystemDigest: "ab", ToolsDigest: "cd",
	}

	tests := []struct {
		name        string
		call        func() (any, error)
		status      int
		ctype, body string
		pattern     string
		uri         string
		reqBody     string // "" = no body
		want        any
	}{
		{
			name: "CreateSession",
			call: func() (any, error) {
				return c.CreateSession(ctx, CreateSessionRequest{ID: "s1", Model: "m", ContextLimit: 1000,
					Tools: []ToolDef{{Name: "bash"}}, Pinned: []Block{{Type: BlockText, Text: "p"}}, Config: "[offload]\nenabled = false\n"})
			},
			status: 201, body: sessionJSON, pattern: RouteCreateSession, uri: "/v1/sessions",
			reqBody: `{"id":"s1","model":"m","context_limit":1000,"tools":[{"name":"bash"}],"pinned":[{"type":"text","text":"p"}],"config":"[offload]\nenabled = false\n"}`,
			want:    wantSession,
		},
		{
			name:   "ListSessions",
			call:   func() (any, error) { return c.ListSessions(ctx) },
			status: 200, body: `{"sessions":[{"id":"a"},{"id":"b"}]}`, pattern: RouteListSessions, uri: "/v1/sessions?limit=1000",
			want: []Session{{ID: "a"}, {ID: "b"}},
		},
		{
			name:   "GetSession",
			call:   func() (any, error) { return c.GetSession(ctx, "s1") },
			status: 200, body: sessionJSON, pattern: RouteGetSession, uri: "/v1/sessions/s1",
			want: wantSession,
		},
		{
			name: "PatchSession",
			call: func() (any, error) {
				return c.PatchSession(ctx, "s1", PatchSessionRequest{System: &sys, Tools: &[]ToolDef{}, ContextLimit: &limit})
			},
			status: 200, body: `{"id":"s1"}`, pattern: RoutePatchSession, uri: "/v1/sessions/s1",
			reqBody: `{"system":"new system","tools":[],"context_limit":50000}`,
			want:    &Session{ID: "s1"},
		},
		{
			name:   "DeleteSession",
			call:   func() (any, error) { return nil, c.DeleteSession(ctx, "s1") },
			status: 204, pattern: RouteDeleteSession, uri: "/v1/sessions/s1",
			want: nil,
		},
		{
			name:   "StartRun",
			call:   func() (any, error) { return c.StartRun(ctx, "s1", RunRequest{}) },
			status: 200, body: `{"seq":9,"circuit":{"open":false,"failures":0}}`, pattern: RouteStartRun, uri: "/v1/sessions/s1/runs",
			reqBody: `{}`,
			want:    &RunResponse{Seq: 9},
		},
		{
			name: "AppendMessages",
			call: func() (any, error) {
				return c.AppendMessages(ctx, "s1", AppendMessagesRequest{Messages: []Message{
					{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "hi"}}},
				}})
			},
			status: 200,
			body: `{"messages":[{"seq":6,"role":"user","content":[{"type":"text","text":"hi"}],"tokens":3}],` +
				`"first_seq":6,"last_seq":7,"tokens":{"value":10,"source":"reported"},"threshold":100,"compaction_queued":true,` +
				`"events":[{"seq":7,"kind":"run_started","time":"2025-01-01T00:00:00Z","data":{"cause":"user_prompt"}}]}`,
			pattern: RouteAppendMessages, uri: "/v1/sessions/s1/messages",
			reqBody: `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
			want: &AppendMessagesResponse{
				Messages: []Message{{Seq: 6, Role: RoleUser, Content: []Block{{Type: BlockText, Text: "hi"}}, Tokens: 3}},
				FirstSeq: 6, LastSeq: 7, Tokens: Tokens{10, TokensReported}, Threshold: 100, CompactionQueued: true,
				Events: []Event{{Seq: 7, Kind: EventRunStarted, Time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Data: json.RawMessage(`{"cause":"user_prompt"}`)}},
			},
		},
		{
			name:   "Context",
			call:   func() (any, error) { return c.Context(ctx, "s1") },
			status: 200,
			body: `{"system":"sys","messages":[{"role":"user","content":[{"type":"text","text":"summary"}]}],` +
				`"tokens":{"value":5,"source":"estimated"},"threshold":100,"context_limit":200,"checkpoint_seq":4,"last_seq":9,` +
				`"diagnostic":{"level":"warn","code":"compaction_failed","message":"every binding failed"}}`,
			pattern: RouteContext, uri: "/v1/sessions/s1/context?format=canonical",
			want: &ContextResponse{System: "sys", Messages: []Message{{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "summary"}}}},
				Tokens: Tokens{5, TokensEstimated}, Threshold: 100, ContextLimit: 200, CheckpointSeq: 4, LastSeq: 9,
				Diagnostic: &Diagnostic{Level: "warn", Code: "compaction_failed", Message: "every binding failed"}},
		},
		{
			name:   "ContextRaw anthropic",
			call:   func() (any, error) { return c.ContextRaw(ctx, "s1", FormatAnthropic) },
			status: 200, ctype: ContentTypeJSON, body: `{"system":"sys",  "messages":[]}`,
			pattern: RouteContext, uri: "/v1/sessions/s1/context?format=anthropic",
			want: json.RawMessage(`{"system":"sys",  "messages":[]}`),
		},
		{
			name: "Compact",
			call: func() (any, error) {
				return c.Compact(ctx, "s1", CompactRequest{Reason: ReasonOverflow, Wait: true})
			},
			status: 200, body: `{"status":"compacted","checkpoint":{"seq":12,"time":"2025-01-01T00:00:00Z","summary":"S","summary_bytes":1,"stalled":true,"snapshot_seq":11,"first_retained_seq":0,"summarized_messages":10,"binding":"b","pruned_retry":true,"tokens_before":100,"tokens_after":90,"shape":"keep-tail","reason":"overflow"}}`,
			pattern: RouteCompact, uri: "/v1/sessions/s1/compact",
			reqBody: `{"reason":"overflow","wait":true}`,
			want: &CompactResponse{Status: CompactDone, Checkpoint: &Checkpoint{Seq: 12, Time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
				Summary: "S", SummaryBytes: 1, Stalled: true, SnapshotSeq: 11, SummarizedMessages: 10, Binding: "b", PrunedRetry: true,
				TokensBefore: 100, TokensAfter: 90, Shape: ShapeKeepTail, Reason: ReasonOverflow}},
		},
		{
			name:   "Compact queued",
			call:   func() (any, error) { return c.Compact(ctx, "s1", CompactRequest{}) },
			status: 202, body: `{"status":"queued"}`, pattern: RouteCompact, uri: "/v1/sessions/s1/compact",
			reqBody: `{}`,
			want:    &CompactResponse{Status: CompactQueued},
		},
		{
			name:   "Checkpoints",
			call:   func() (any, error) { return c.Checkpoints(ctx, "s1") },
			status: 200, body: `{"checkpoints":[{"seq":4,"summary":"x","binding":"extractive"}]}`,
			pattern: RouteCheckpoints, uri: "/v1/sessions/s1/checkpoints",
			want: []Checkpoint{{Seq: 4, Summary: "x", Binding: "extractive"}},
		},
		{
			name:   "Search",
			call:   func() (any, error) { return c.Search(ctx, "s1", "go test ./...", 5, 10) },
			status: 200, body: `{"hits":[{"seq":7,"source":"offloaded","role":"tool result","tool":"Bash","artifact":"artifact://ab","line":3,"text":"FAIL x"}],"total":12,"next":11,"working_dir":"/w"}`,
			pattern: RouteSearch, uri: "/v1/sessions/s1/search?limit=5&offset=10&q=go+test+.%2F...",
			want: &SearchResponse{Hits: []SearchHit{{Seq: 7, Source: SearchOffloaded, Role: "tool result", Tool: "Bash", Artifact: "artifact://ab", Line: 3, Text: "FAIL x"}}, Total: 12, Next: 11, WorkingDir: "/w"},
		},
		{
			name: "ReadMessages",
			call: func() (any, error) {
				return c.ReadMessages(ctx, "s1", ReadMessagesRequest{From: 3, To: 9, Offset: 100, MaxChars: 50})
			},
			status: 200, body: `{"from":3,"to":9,"offset":100,"next":150,"text":"=== seq 3 · user\nhi\n"}`,
			pattern: RouteReadMessages, uri: "/v1/sessions/s1/messages?from=3&max_chars=50&offset=100&to=9",
			want: &MessagesPage{From: 3, To: 9, Offset: 100, Next: 150, Text: "=== seq 3 · user\nhi\n"},
		},
		{
			name:   "Artifact by id",
			call:   func() (any, error) { return c.Artifact(ctx, "abc123") },
			status: 200, ctype: ContentTypeArtifact, body: "raw\x00bytes",
			pattern: RouteArtifact, uri: "/v1/artifacts/abc123",
			want: []byte("raw\x00bytes"),
		},
		{
			name:   "Artifact by URI",
			call:   func() (any, error) { return c.Artifact(ctx, "artifact://abc123") },
			status: 200, ctype: ContentTypeArtifact, body: "x",
			pattern: RouteArtifact, uri: "/v1/artifacts/abc123",
			want: []byte("x"),
		},
		{
			name:   "Status",
			call:   func() (any, error) { return c.Status(ctx) },
			status: 200, body: `{"version":"0.1.0","started":"2025-01-01T00:00:00Z","uptime_seconds":1.5,"sessions":2,"queue":{"depth":1,"capacity":64},"workers":{"size":4,"busy":1}}`,
			pattern: RouteStatus, uri: "/v1/status",
			want: &Status{Version: "0.1.0", Started: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), UptimeSeconds: 1.5, Sessions: 2,
				Queue: Queue{Depth: 1, Capacity: 64}, Workers: Workers{Size: 4, Busy: 1}},
		},
		{
			name:   "Ledger",
			call:   func() (any, error) { return c.Ledger(ctx, "s1") },
			status: 200, body: `{"session":"s1","entries":[{"kind":"request","time":"2025-01-01T00:00:00Z","mode":"enforce","client_tokens":900,"sent_tokens":300,"reported":{"input":1,"cache_read":200,"cache_write_5m":99,"cache_write_1h":0,"output":7},"counterfactual":{"input":1,"cache_read":800,"cache_write_5m":99,"cache_write_1h":0,"output":7},"causes":{"growth":99},"cost":0.002}],"totals":{"requests":1,"saved":0.5},"waterfall":[{"label":"without ctxd","value":1}]}`,
			pattern: RouteLedger, uri: "/v1/sessions/s1/ledger",
			want: &LedgerResponse{Session: "s1", Entries: []LedgerEntry{{Kind: "request", Time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Mode: ModeEnforce,
				ClientTokens: 900, SentTokens: 300, Reported: LedgerUsage{Input: 1, CacheRead: 200, CacheWrite5m: 99, Output: 7},
				Counterfactual: LedgerUsage{Input: 1, CacheRead: 800, CacheWrite5m: 99, Output: 7}, Causes: map[string]uint64{"growth": 99}, Cost: 0.002}},
				Totals: LedgerTotals{Requests: 1, Saved: 0.5}, Waterfall: []LedgerBar{{Label: "without ctxd", Value: 1}}},
		},
		{
			name:   "SetMode",
			call:   func() (any, error) { return nil, c.SetMode(ctx, "s1", ModeObserve) },
			status: 200, body: `{"mode":"observe"}`,
			pattern: RouteSetMode, uri: "/v1/sessions/s1/mode", reqBody: `{"mode":"observe"}`,
		},
		{
			name:   "LedgerTotals",
			call:   func() (any, error) { return c.LedgerTotals(ctx) },
			status: 200, body: `{"sessions":3,"totals":{"requests":10,"without_ctxd":2,"paid":1,"summarizer":0.1,"saved":0.9}}`,
			pattern: RouteLedgerTotals, uri: "/v1/ledger",
			want: &LedgerTotalsResponse{Sessions: 3, Totals: LedgerSummary{Requests: 10, WithoutCtxd: 2, Paid: 1, Summarizer: 0.1, Saved: 0.9}},
		},
		{
			name:   "DashboardLink",
			call:   func() (any, error) { return c.DashboardLink(ctx) },
			status: 200, body: `{"path":"/ui/login?code=ab","url":"http://127.0.0.1:7421/ui/login?code=ab","expires":"2026-12-02T10:02:00Z"}`,
			pattern: RouteDashboardLink, uri: "/v1/dashboard/links",
			want: &DashboardLink{Path: "/ui/login?code=ab", URL: "http://127.0.0.1:7421/ui/login?code=ab", Expires: time.Date(2026, 12, 2, 10, 2, 0, 0, time.UTC)},
		},
		{
			name:   "Metrics",
			call:   func() (any, error) { return c.Metrics(ctx) },
			status: 200, ctype: "text/plain; version=0.0.4", body: "# HELP ctxd_sessions x\nctxd_sessions 2\n",
			pattern: RouteMetrics, uri: "/metrics",
			want: []byte("# HELP ctxd_sessions x\nctxd_sessions 2\n"),
		},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctype := tt.ctype
			if ctype == "" {
				ctype = ContentTypeJSON
			}
			f.reply(tt.status, ctype, tt.body)
			got, err := tt.call()
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			r := f.request()
			if r.Pattern != tt.pattern {
				t.Errorf("route %q, want %q", r.Pattern, tt.pattern)
			}
			if r.URI != tt.uri {
				t.Errorf("URI %q, want %q", r.URI, tt.uri)
			}
			if r.Body != tt.reqBody {
				t.Errorf("body\n got %s\nwant %s", r.Body, tt.reqBody)
			}
			if tt.reqBody != "" && r.Header.Get("Content-Type") != ContentTypeJSON {
				t.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
			}
			if ua := r.Header.Get("User-Agent"); ua != "ctxd-client/"+Version {
				t.Errorf("User-Agent %q", ua)
			}
			if r.Header.Get("Authorization") != "" {
				t.Errorf("Authorization sent without a Token")
			}
			if tt.want == nil {
				if got != nil && !reflect.ValueOf(got).IsNil() {
					t.Errorf("got %v, want nothing", got)
				}
			} else if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decoded\n got %#v\nwant %#v", got, tt.want)
			}
			covered[r.Pattern] = true
		})
	}
	// RouteEvents is covered by the SSE tests.
	covered[RouteEvents] = true
	for _, route := range Routes() {
		if !covered[route] {
			t.Errorf("route %q has no client test", route)
		}
	}
}

func TestClientErrorBodies(t *testing.T) {
	f := &fakeDaemon{}
	c := &Client{Socket: serveUnix(t, f.mux())}
	ctx := context.Background()
	tests := []struct {
		name      string
		status    int
		body      string
		call      func() error
		wantCode  string
		wantMsg   string
		wantField string
	}{
		{
			name: "envelope", status: 400,
			body: `{"error":{"code":"invalid","message":"messages[0]: tool result for unknown call \"c9\"","field":"messages[0].tool_call_id"}}`,
			call: func() error {
				_, err := c.AppendMessages(ctx, "s1", AppendMessagesRequest{Messages: []Message{{Role: RoleTool, ToolCallID: "c9"}}})
				return err
			},
			wantCode: Invalid, wantMsg: `messages[0]: tool result for unknown call "c9"`, wantField: "messages[0].tool_call_id",
		},
		{
			name: "conflict on compact", status: 409,
			body:     `{"error":{"code":"conflict","message":"Not compacting now: a tool call is still waiting on its result."}}`,
			call:     func() error { _, err := c.Compact(ctx, "s1", CompactRequest{Wait: true}); return err },
			wantCode: Conflict, wantMsg: "Not compacting now: a tool call is still waiting on its result.",
		},
		{
			name: "envelope without code", status: 503, body: `{"error":{"message":"compaction queue is full"}}`,
			call:     func() error { _, err := c.Compact(ctx, "s1", CompactRequest{}); return err },
			wantCode: Unavailable, wantMsg: "compaction queue is full",
		},
		{
			name: "plain text", status: 404, body: "404 page not found\n",
			call:     func() error { _, err := c.GetSession(ctx, "nope"); return err },
			wantCode: NotFound, wantMsg: "404 page not found",
		},
		{
			name: "empty body", status: 504, body: "",
			call:     func() error { _, err := c.Status(ctx); return err },
			wantCode: Timeout, wantMsg: "gateway timeout",
		},
		{
			name: "unknown status", status: 418, body: "",
			call:     func() error { _, err := c.Artifact(ctx, "x"); return err },
			wantCode: Invalid, wantMsg: "i'm a teapot",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.reply(tt.status, ContentTypeJSON, tt.body)
			err := tt.call()
			if err == nil {
				t.Fatal("no error")
			}
			e, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			if ErrorCode(err) != tt.wantCode || e.Message != tt.wantMsg || e.Field != tt.wantField {
				t.Errorf("got code %q message %q field %q, want %q %q %q", ErrorCode(err), e.Message, e.Field, tt.wantCode, tt.wantMsg, tt.wantField)
			}
		})
	}
}

func TestClientRealMuxErrors(t *testing.T) {
	f := &fakeDaemon{}
	p := serveUnix(t, f.mux())
	c := &Client{Socket: p}
	ctx := context.Background()
	// A method the mux does not serve on that path: 405 from ServeMux.
	resp, err := c.request(ctx, http.MethodPut, SessionPath("s1"), nil, "")
	if err == nil {
		resp.Body.Close()
		t.Fatal("PUT succeeded")
	}
	if ErrorCode(err) != MethodNotAllowed {
		t.Errorf("code %q, want %q (%v)", ErrorCode(err), MethodNotAllowed, err)
	}
	// A path no route matches.
	_, err = c.raw(ctx, http.MethodGet, "/v2/nothing", "")
	if ErrorCode(err) != NotFound {
		t.Errorf("code %q, want %q (%v)", ErrorCode(err), NotFound, err)
	}
}

func TestClientConnectionFailure(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.sock")
	c := &Client{Socket: p}
	_, err := c.Status(context.Background())
	if err == nil {
		t.Fatal("no error")
	}
	if !strings.Contains(err.Error(), "is ctxd running? socket: "+p+": ") {
		t.Errorf("message %q does not name the socket", err)
	}
	if ErrorCode(err) != Unavailable {
		t.Errorf("code %q, want %q", ErrorCode(err), Unavailable)
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("errors.Is(err, ENOENT) = false for %v", err)
	}
	if _, ok := errors.AsType[*net.OpError](err); !ok {
		t.Errorf("the dial error is not reachable: %v", err)
	}
}

func TestClientConnectionFailureTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := &Client{BaseURL: "http://" + addr}
	_, err = c.Status(context.Background())
	if !strings.Contains(err.Error(), "is ctxd running? address: http://"+addr) || ErrorCode(err) != Unavailable {
		t.Errorf("got %q (%s)", err, ErrorCode(err))
	}
}

func TestClientZeroValueUsesEnv(t *testing.T) {
	f := &fakeDaemon{}
	p := serveUnix(t, f.mux())
	t.Setenv(EnvSocket, p)
	var c Client
	f.reply(200, ContentTypeJSON, `{"version":"0.1.0"}`)
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "0.1.0" || c.SocketPath() != p {
		t.Errorf("status %+v via socket %q, want %q", st, c.SocketPath(), p)
	}
}

func TestDefaultSocketPath(t *testing.T) {
	uid := strconv.Itoa(os.Getuid())
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"CTXD_SOCKET wins", map[string]string{EnvSocket: "/run/x.sock", "XDG_RUNTIME_DIR": "/run/user/1"}, "/run/x.sock"},
		{"XDG_RUNTIME_DIR", map[string]string{"XDG_RUNTIME_DIR": "/run/user/1"}, "/run/user/1/ctxd.sock"},
		{"empty CTXD_SOCKET ignored", map[string]string{EnvSocket: "", "XDG_RUNTIME_DIR": "/run/user/1"}, "/run/user/1/ctxd.sock"},
		{"fallback", map[string]string{}, "/tmp/ctxd-" + uid + "/ctxd.sock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DefaultSocketPath(func(k string) string { return tt.env[k] })
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestClientDialTokenUserAgent(t *testing.T) {
	f := &fakeDaemon{}
	p := serveUnix(t, f.mux())
	var dials atomic.Int32
	var gotNet, gotAddr atomic.Value
	c := &Client{
		Socket:    p,
		Token:     "t0ken",
		UserAgent: "ctxctl/" + Version,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			gotNet.Store(network)
			gotAddr.Store(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	f.reply(200, ContentTypeJSON, `{}`)
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := f.request()
	if r.Header.Get("Authorization") != "Bearer t0ken" {
		t.Errorf("Authorization %q", r.Header.Get("Authorization"))
	}
	if r.Header.Get("User-Agent") != "ctxctl/"+Version {
		t.Errorf("User-Agent %q", r.Header.Get("User-Agent"))
	}
	if dials.Load() != 1 || gotNet.Load() != "unix" || gotAddr.Load() != p {
		t.Errorf("Dial called %d times with %v %v", dials.Load(), gotNet.Load(), gotAddr.Load())
	}
}

func TestClientBaseURL(t *testing.T) {
	f := &fakeDaemon{}
	srv := httptest.NewServer(f.mux())
	defer srv.Close()
	c := &Client{BaseURL: srv.URL + "/"}
	f.reply(200, ContentTypeJSON, `{"sessions":[]}`)
	got, err := c.ListSessions(context.Background())
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("got %v, %v", got, err)
	}
	if r := f.request(); r.Pattern != RouteListSessions {
		t.Errorf("route %q", r.Pattern)
	}
	if c.SocketPath() != "" {
		t.Errorf("SocketPath %q with BaseURL", c.SocketPath())
	}
}

func TestClientHTTPClient(t *testing.T) {
	f := &fakeDaemon{}
	srv := httptest.NewServer(f.mux())
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, HTTPClient: srv.Client()}
	f.reply(200, ContentTypeJSON, `{"version":"x"}`)
	if st, err := c.Status(context.Background()); err != nil || st.Version != "x" {
		t.Fatalf("got %v, %v", st, err)
	}
}

func TestClientContextCanceled(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	p := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	c := &Client{Socket: p}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-entered
		cancel()
	}()
	_, err := c.Compact(ctx, "s1", CompactRequest{Wait: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if strings.Contains(err.Error(), "is ctxd running") {
		t.Errorf("a cancelled request blames the daemon: %v", err)
	}
}

func TestClientRefusesBadInputWithoutRoundTrip(t *testing.T) {
	var hits atomic.Int32
	p := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	c := &Client{Socket: p}
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		code string
	}{
		{"empty session id", func() error { _, err := c.GetSession(ctx, ""); return err }, Invalid},
		{"empty artifact", func() error { _, err := c.Artifact(ctx, "artifact://"); return err }, Invalid},
		{"empty id events", func() error { return c.Events(ctx, "", 0, func(Event) error { return nil }) }, Invalid},
		{"body over the limit", func() error {
			big := strings.Repeat("x", MaxRequestBytes)
			_, err := c.AppendMessages(ctx, "s1", AppendMessagesRequest{Messages: []Message{{Role: RoleUser, Content: []Block{{Type: BlockText, Text: big}}}}})
			return err
		}, TooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); ErrorCode(err) != tt.code {
				t.Errorf("got %v (%s), want %s", err, ErrorCode(err), tt.code)
			}
		})
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests reached the daemon", hits.Load())
	}
}

func TestPathsEscapeIDs(t *testing.T) {
	if got := SessionPath("a/b c"); got != "/v1/sessions/a%2Fb%20c" {
		t.Errorf("SessionPath = %q", got)
	}
	if got := EventsPath("s", 5, true); got != "/v1/sessions/s/events?follow=true&from=5" {
		t.Errorf("EventsPath = %q", got)
	}
	if got := EventsPath("s", 0, false); got != "/v1/sessions/s/events" {
		t.Errorf("EventsPath = %q", got)
	}
	if got := ContextPath("s", ""); got != "/v1/sessions/s/context" {
		t.Errorf("ContextPath = %q", got)
	}
	if got := ArtifactPath("artifact://ab"); got != "/v1/artifacts/ab" {
		t.Errorf("ArtifactPath = %q", got)
	}
}

// TestClientPagesThroughSessions: ListSessions follows Next from page to
// page, passing it as after, and stops at the page without one.
func TestClientPagesThroughSessions(t *testing.T) {
	var uris []string
	pages := map[string]string{
		"":  `{"sessions":[{"id":"a"},{"id":"b"}],"next":"b"}`,
		"b": `{"sessions":[{"id":"c"}]}`,
	}
	mux := http.NewServeMux()
	mux.HandleFunc(RouteListSessions, func(w http.ResponseWriter, r *http.Request) {
		uris = append(uris, r.RequestURI)
		w.Header().Set("Content-Type", ContentTypeJSON)
		io.WriteString(w, pages[r.URL.Query().Get(QueryAfter)])
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &Client{BaseURL: srv.URL}
	got, err := c.ListSessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != "a,b,c" {
		t.Errorf("ids %v, want a,b,c", ids)
	}
	want := []string{"/v1/sessions?limit=1000", "/v1/sessions?after=b&limit=1000"}
	if strings.Join(uris, " ") != strings.Join(want, " ") {
		t.Errorf("requests %v, want %v", uris, want)
	}
	page, err := c.ListSessionsPage(context.Background(), "b", 0)
	if err != nil || len(page.Sessions) != 1 || page.Next != "" || uris[2] != "/v1/sessions?after=b" {
		t.Errorf("ListSessionsPage: %+v, %v, request %s", page, err, uris[len(uris)-1])
	}
}

// TestClientRetriesAppendWithOneKey: with Retries, an append that failed
// with 504 (may have been stored) and then 503 (with Retry-After: 0) is
// sent again with the same Idempotency-Key each time, and the third
// answer is returned; without Retries nothing is retried and no key is
// sent; an invalid answer is never retried.
func TestClientRetriesAppendWithOneKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, `{"error":{"code":"timeout","message":"the write may have been stored"}}`)
		},
		func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"electing a leader"}}`)
		},
		func(w http.ResponseWriter) {
			w.Header().Set(HeaderIdempotentReplayed, "true")
			_, _ = io.WriteString(w, `{"messages":[],"first_seq":3,"last_seq":4,"tokens":{"value":1,"source":"estimated"},"threshold":1,"compaction_queued":false,"replayed":true}`)
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(HeaderIdempotencyKey))
		n := len(keys)
		mu.Unlock()
		answers[(n-1)%len(answers)](w)
	}))
	defer srv.Close()
	req := AppendMessagesRequest{Messages: []Message{{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "hi"}}}}}

	c := &Client{BaseURL: srv.URL, Retries: 3}
	start := time.Now()
	res, err := c.AppendMessages(context.Background(), "s", req)
	if err != nil || !res.Replayed || res.FirstSeq != 3 {
		t.Fatalf("after retries: %+v %v", res, err)
	}
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("keys sent %q: want one key, three times", keys)
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Errorf("retried in %v: want the 1 s back-off after the 504 and Retry-After 0 after the 503", d)
	}

	keys = nil
	plain := &Client{BaseURL: srv.URL}
	if _, err := plain.AppendMessages(context.Background(), "s", req); ErrorCode(err) != Timeout {
		t.Fatalf("without retries: %v, want the 504", err)
	}
	if len(keys) != 1 || keys[0] != "" {
		t.Fatalf("without retries the client sent keys %q, want one request without a key", keys)
	}

	keys = nil
	req.IdempotencyKey = "mine-1"
	if _, err := plain.AppendMessages(context.Background(), "s", req); ErrorCode(err) != Timeout || len(keys) != 1 || keys[0] != "mine-1" {
		t.Fatalf("a caller's key: %v, keys %q", err, keys)
	}
}
