package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/server"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
)

// daemon is an in-process ctxd (engine and HTTP server over loopback) and
// a client of it.
func daemon(t *testing.T) *api.Client {
	t.Helper()
	db, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	arts, err := artifacts.Open(db, bytes.Repeat([]byte{7}, artifacts.SecretSize))
	if err != nil {
		t.Fatal(err)
	}
	log := checkpoint.Open(db, checkpoint.Options{})
	pool, err := workers.New(workers.Options{Size: 1, Queue: 8, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = pool.Run(ctx) })
	quiet := slog.New(slog.DiscardHandler)
	cfg := config.Defaults()
	cfg.Storage.DataDir = t.TempDir()
	eng, err := engine.New(engine.Options{Config: cfg, Log: log, Artifacts: arts, Pool: pool, Logger: quiet,
		Summarizer: summarizer.New(summarizer.Options{Logger: quiet})})
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{Engine: eng, Artifacts: arts, Logger: quiet, AuthToken: "tok",
		Pool: server.PoolInfo{Stats: pool.Stats, Size: 1, Capacity: 8}})
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ConnContext = srv.ConnContext
	ts.Start()
	t.Cleanup(func() {
		srv.BeginShutdown()
		ts.Close()
		cancel()
		wg.Wait()
		_ = log.Close()
		_ = arts.Close()
		_ = db.Close()
	})
	return &api.Client{BaseURL: ts.URL, Token: "tok"}
}

func text(role api.Role, s string) api.Message {
	return api.Message{Role: role, Content: []api.Block{{Type: api.BlockText, Text: s}}}
}

// session creates a session whose system prompt states dir (as Claude Code
// does), with a compacted tool round whose result was offloaded.
func session(t *testing.T, c *api.Client, id, dir, secret string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: id, Model: "claude-sonnet-4-5", ContextLimit: 20000,
		System: "You are an agent.\n - Primary working directory: " + dir + "\n"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("ok line\n", 3000) + "FAIL: TestParse expected 7, got " + secret + "\n" + strings.Repeat("tail line\n", 500)
	call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "Bash", Input: json.RawMessage(`{"command":"go test ./parse/"}`)}}}
	msgs := []api.Message{text(api.RoleUser, "Fix the parser; keep the quokka option "+secret+"."), call,
		{Role: api.RoleTool, ToolCallID: "c1", ToolName: "Bash", Content: []api.Block{{Type: api.BlockText, Text: big}}},
		text(api.RoleAssistant, "The parser is off by one. "+strings.Repeat("word ", 6000)),
		text(api.RoleUser, "go on"), text(api.RoleAssistant, "ok")}
	if _, err := c.AppendMessages(ctx, id, api.AppendMessagesRequest{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Compact(ctx, id, api.CompactRequest{Wait: true}); err != nil || out.Checkpoint == nil {
		t.Fatalf("compact: %+v %v", out, err)
	}
}

// connect runs the MCP server on in-memory transports and returns the SDK
// client's session.
func connect(t *testing.T, opts Options) *mcp.ClientSession {
	t.Helper()
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait(); cancel() })
	return cs
}

// call calls a tool and returns its text and whether it reported an error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

var seqRe = regexp.MustCompile(`seq (\d+) · offloaded result of Bash \((artifact://\S+)\)`)

// The SDK's client lists the two tools and calls them: search finds a
// compacted user message and the line of an offloaded result with its
// artifact; read shows a seq range and pages through the artifact; bad
// arguments come back as tool errors naming the field.
func TestToolsWithTheSDKClient(t *testing.T) {
	c := daemon(t)
	session(t, c, "proj", "/home/dev/proj", "41")
	cs := connect(t, Options{Client: c, WorkingDir: "/home/dev/proj/"})

	tl, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tl.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil {
			t.Errorf("tool %s has no input schema", tool.Name)
		}
	}
	if strings.Join(names, ",") != "read,search" && strings.Join(names, ",") != "search,read" {
		t.Fatalf("tools %v", names)
	}

	out, isErr := call(t, cs, "search", map[string]any{"query": "quokka option"})
	if isErr || !strings.Contains(out, "Session proj:") || !regexp.MustCompile(`seq 1 · user · line 2: Fix the parser; keep the quokka option 41\.`).MatchString(out) {
		t.Fatalf("search quokka:\n%s", out)
	}
	out, isErr = call(t, cs, "search", map[string]any{"query": "expected 7, got"})
	m := seqRe.FindStringSubmatch(out)
	if isErr || m == nil || !strings.Contains(out, "line 3001: FAIL: TestParse expected 7, got 41") {
		t.Fatalf("search in the offloaded result:\n%s", out)
	}
	seq, uri := m[1], m[2]

	out, isErr = call(t, cs, "read", map[string]any{"from": json.Number(seq), "to": json.Number(seq)})
	if isErr || !strings.Contains(out, "=== seq "+seq+" · tool result · Bash · call c1") {
		t.Fatalf("read seq %s:\n%.300s", seq, out)
	}
	// The artifact in pages of 10,000 characters, joined, is the whole text.
	var whole strings.Builder
	offset := 0
	for range 10 {
		out, isErr = call(t, cs, "read", map[string]any{"artifact": uri, "offset": offset, "max_chars": 10000})
		if isErr {
			t.Fatalf("read artifact: %s", out)
		}
		header, body, _ := strings.Cut(out, "\n")
		if !strings.HasPrefix(header, uri+": characters ") {
			t.Fatalf("header %q", header)
		}
		more := regexp.MustCompile(`\n\[More: read with offset (\d+)\.\]$`).FindStringSubmatchIndex(body)
		if more == nil {
			whole.WriteString(body)
			break
		}
		whole.WriteString(body[:more[0]])
		offset = atoi(t, body[more[2]:more[3]])
	}
	if !strings.Contains(whole.String(), "FAIL: TestParse expected 7, got 41") || strings.Count(whole.String(), "ok line") != 3000 {
		t.Fatalf("artifact pages joined: %d bytes", whole.Len())
	}

	if out, _ = call(t, cs, "search", map[string]any{"query": "no such words anywhere"}); !strings.Contains(out, "No line of session proj") {
		t.Errorf("search for nothing: %s", out)
	}
	if out, isErr = call(t, cs, "search", map[string]any{"query": "x", "limit": 1000}); !isErr || !strings.Contains(out, "field limit") {
		t.Errorf("limit 1000: error %v, %s", isErr, out)
	}
	if out, isErr = call(t, cs, "read", map[string]any{"max_chars": 300000}); !isErr {
		t.Errorf("max_chars 300000 accepted: %s", out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Without --session, the tools read the most recently updated session whose
// agent stated the working directory; none is a tool error saying how to
// name one; --session wins.
func TestSessionByWorkingDirectory(t *testing.T) {
	c := daemon(t)
	session(t, c, "old", "/home/dev/proj", "1")
	session(t, c, "other", "/home/dev/elsewhere", "2")
	session(t, c, "new", "/home/dev/proj", "3")
	ctx := context.Background()
	if id, err := FindSession(ctx, c, "/home/dev/proj"); err != nil || id != "new" {
		t.Fatalf("FindSession = %q, %v; want new", id, err)
	}
	// A message to "old" makes it the most recently updated.
	if _, err := c.AppendMessages(ctx, "old", api.AppendMessagesRequest{Messages: []api.Message{text(api.RoleUser, "more")}}); err != nil {
		t.Fatal(err)
	}
	if id, err := FindSession(ctx, c, "/home/dev/proj"); err != nil || id != "old" {
		t.Fatalf("after an append FindSession = %q, %v; want old", id, err)
	}
	out, _ := call(t, connect(t, Options{Client: c, WorkingDir: "/home/dev/proj"}), "search", map[string]any{"query": "quokka option"})
	if !strings.Contains(out, "Session old:") || !strings.Contains(out, "option 1.") {
		t.Errorf("search by working directory:\n%s", out)
	}
	out, isErr := call(t, connect(t, Options{Client: c, WorkingDir: "/nowhere"}), "search", map[string]any{"query": "x"})
	if !isErr || !strings.Contains(out, "--session") {
		t.Errorf("no session for /nowhere: error %v, %s", isErr, out)
	}
	out, _ = call(t, connect(t, Options{Client: c, Session: "other", WorkingDir: "/home/dev/proj"}), "search", map[string]any{"query": "quokka option"})
	if !strings.Contains(out, "Session other:") || !strings.Contains(out, "option 2.") {
		t.Errorf("--session other:\n%s", out)
	}
}
