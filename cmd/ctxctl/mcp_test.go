package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ctxd/ctxd/api"
)

// `ctxctl mcp` against a real ctxd: the SDK's client speaks MCP to it over
// its stdin and stdout, finds the session by the working directory its
// system prompt states, and calls search; closing stdin ends the command
// with exit 0.
func TestMCPOverStdio(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	if _, err := d.client.CreateSession(ctx, api.CreateSessionRequest{ID: "s1", Model: "claude-sonnet-4-5",
		System: "<env>\nWorking directory: /home/dev/stdio-proj\n</env>"}); err != nil {
		t.Fatal(err)
	}
	msg := api.Message{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: "Rename the walrus module to seal."}}}
	if _, err := d.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{msg}}); err != nil {
		t.Fatal(err)
	}

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr strings.Builder
	e := d.env(outW, &stderr)
	e.stdin = inR
	code := make(chan int, 1)
	go func() {
		c := runEnv([]string{"ctxctl", "mcp", "--cwd", "/home/dev/stdio-proj"}, e)
		outW.Close()
		code <- c
	}()

	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"query": "walrus"}})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if res.IsError || !strings.Contains(text, "Session s1:") || !strings.Contains(text, "Rename the walrus module to seal.") {
		t.Fatalf("search over stdio: %s", text)
	}
	_ = cs.Close()
	select {
	case c := <-code:
		if c != exitOK {
			t.Fatalf("ctxctl mcp exit %d; stderr %s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ctxctl mcp did not end when its stdin closed")
	}
}

// `ctxctl session search` and `session read` print what the MCP tools
// answer, for agents without MCP (pi runs them from its shell).
func TestSessionSearchAndRead(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	if _, err := d.client.CreateSession(ctx, api.CreateSessionRequest{ID: "s1", Model: "claude-sonnet-4-5",
		System: "Current working directory: /home/dev/pi-proj"}); err != nil {
		t.Fatal(err)
	}
	msg := api.Message{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: "Port the narwhal parser."}}}
	if _, err := d.client.AppendMessages(ctx, "s1", api.AppendMessagesRequest{Messages: []api.Message{msg}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := d.run(t, "session", "search", "--cwd", "/home/dev/pi-proj", "narwhal")
	if code != 0 || !strings.Contains(out, "Session s1: lines 1 to 1 of 1") || !strings.Contains(out, "seq 1 · user · line 2: Port the narwhal parser.") {
		t.Fatalf("search: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = d.run(t, "session", "read", "--session", "s1", "--from", "1", "--to", "1")
	if code != 0 || !strings.HasPrefix(out, "=== seq 1 · user") || !strings.Contains(out, "Port the narwhal parser.") {
		t.Fatalf("read: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = d.run(t, "session", "search", "--session", "s1", "--limit", "500", "x")
	if code != 1 || !strings.Contains(errOut, "limit") {
		t.Fatalf("limit 500: exit %d, %s", code, errOut)
	}
	code, _, errOut = d.run(t, "session", "search", "--cwd", "/nowhere", "x")
	if code != 1 || !strings.Contains(errOut, "--session") {
		t.Fatalf("no session for /nowhere: exit %d, %s", code, errOut)
	}
}

// A client that pipes its requests and closes stdin at once gets every
// answer before `ctxctl mcp` exits 0 (mcpserver.Serve holds the end of
// stdin back until then).
func TestMCPPipedRequestsAllAnswered(t *testing.T) {
	d := startDaemon(t)
	var out, stderr strings.Builder
	e := d.env(&out, &stderr)
	e.stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":"walrus"}}}
`)
	if c := runEnv([]string{"ctxctl", "mcp", "--session", "nosuch"}, e); c != exitOK {
		t.Fatalf("ctxctl mcp exit %d; stderr %s", c, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("stdout %d lines, want the 3 answers:\n%s", len(lines), out.String())
	}
	// JSON-RPC matches answers by id: the server may answer the piped
	// requests in any order.
	byID := map[string]string{}
	for _, l := range lines {
		for _, id := range []string{"1", "2", "3"} {
			if strings.Contains(l, `"id":`+id+`,`) {
				byID[id] = l
			}
		}
	}
	for id, want := range map[string]string{"1": `"id":1,"result":{`, "2": `"id":2,"result":{`, "3": `"id":3,"result":{"content":[`} {
		if !strings.Contains(byID[id], want) {
			t.Errorf("answer to request %s: %q, want %s", id, byID[id], want)
		}
	}
	if !strings.Contains(byID["2"], `"name":"search"`) {
		t.Errorf("tools/list answer lacks search: %s", byID["2"])
	}
}
