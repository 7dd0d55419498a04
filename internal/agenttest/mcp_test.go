package agenttest

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/fakeprovider"
	"github.com/ctxd/ctxd/server"
)

// buildCtxctl builds cmd/ctxctl into a temporary directory.
func buildCtxctl(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "ctxctl")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/ctxd/ctxd/cmd/ctxctl").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ctxctl: %v\n%s", err, out)
	}
	return bin
}

// serveAPI serves the daemon API of c's engine on a unix socket, as ctxd
// does, and returns the socket's path.
func serveAPI(t *testing.T, c *ctxd) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctxd-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ctxd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{Engine: c.eng, Artifacts: c.arts, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	hs := &http.Server{Handler: srv.Handler(), ConnContext: srv.ConnContext}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { srv.BeginShutdown(); _ = hs.Close() })
	return sock
}

// TestClaudeCodeCallsCtxdMCP: Claude Code, set up with `claude mcp add ctxd
// -- ctxctl mcp` as docs/cli.md says and pointed at ctxd's proxy, calls the
// MCP tool mcp__ctxd__search that the scripted fake model asks for; ctxctl
// mcp finds the proxied session by the working directory Claude Code's
// system prompt states, and the tool's answer — the line of the session's
// first prompt with its seq — reaches the model, which quotes it.
func TestClaudeCodeCallsCtxdMCP(t *testing.T) {
	claude := Bin(t, ClaudeCode)
	ctxctl := buildCtxctl(t)
	const codeword = "walrus-7731"
	p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 1, OutputBytes: 2000, Marker: "CTXD-DONE-MCP",
		RecallTool: "mcp__ctxd__search", RecallInput: map[string]any{"query": codeword}, RecallExpect: "· user · line"})
	c := newCtxd(t, p.URL(), 0)
	sock := serveAPI(t, c)

	run := Run{Agent: ClaudeCode, BaseURL: c.url, Home: t.TempDir(), WorkDir: t.TempDir(),
		Prompt: "Run the scripted task. The codeword is " + codeword + "."}
	add := exec.Command(claude, "mcp", "add", "-s", "user", "ctxd", "--", ctxctl, "--socket", sock, "mcp")
	add.Dir = run.WorkDir
	add.Env = []string{"HOME=" + run.Home, "PATH=" + os.Getenv("PATH"), "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "HTTPS_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost"}
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("claude mcp add: %v\n%s", err, out)
	}

	res := run.Exec(t)
	Log(t, res, p)
	if res.ExitCode != 0 || res.TimedOut || !strings.Contains(res.FinalText(), "CTXD-DONE-MCP") {
		t.Fatalf("exit %d, timed out %v, answer %q", res.ExitCode, res.TimedOut, res.FinalText())
	}
	called := false
	for _, r := range p.Requests() {
		if strings.Contains(string(r.Body), `"name":"mcp__ctxd__search"`) && strings.Contains(string(r.Body), `"tool_use"`) {
			called = true
		}
	}
	if !called {
		t.Fatal("no request carried Claude Code's call of mcp__ctxd__search")
	}
	// The model quotes the tool's answer: a hit of the session's search,
	// with its seq, holding the codeword.
	final := res.FinalText()
	i := strings.Index(final, "recalled: ")
	if i < 0 || !strings.Contains(final[i:], codeword) || !strings.Contains(final[i:], "seq ") {
		t.Fatalf("the final answer does not quote a search hit: %q", final)
	}
	if n := len(p.Refused()); n != 0 {
		t.Fatalf("%d refused requests, first: %s", n, p.Refused()[0].Error)
	}
}
