package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/ctxd/ctxd/internal/corpustest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/internal/syncbuf"
)

// fakeCtxd is a ctxd stand-in that prints its arguments, echoes one line
// of stdin, writes to stderr, and exits with the status named by a file
// argument "exit-N.jsonl".
const fakeCtxd = `#!/bin/sh
echo "ctxd $*"
echo "to stderr" >&2
case "$2" in
stdin.jsonl) read line; echo "stdin: $line" ;;
exit-3.jsonl) exit 3 ;;
esac
exit 0
`

func writeFakeCtxd(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ctxd"), []byte(fakeCtxd), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestExecCtxd: replay and compact --transcript run ctxd next to ctxctl
// with the documented arguments, pass stdin, stdout and stderr through and
// end with ctxd's exit status.
func TestExecCtxd(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	dir := t.TempDir()
	writeFakeCtxd(t, dir)
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout string
	}{
		{"replay", []string{"replay", "--config", "a.toml", "--config", "b,c.toml", "--context-limit", "200000", "--data-dir", "d", "--json", "s.jsonl"}, "", 0,
			"ctxd replay s.jsonl --config a.toml --config b,c.toml --context-limit 200000 --data-dir d --json\n"},
		{"replay minimal", []string{"replay", "s.jsonl"}, "", 0, "ctxd replay s.jsonl\n"},
		{"exit status", []string{"replay", "exit-3.jsonl"}, "", 3, "ctxd replay exit-3.jsonl\n"},
		{"stdin", []string{"replay", "stdin.jsonl"}, "hello\n", 0, "ctxd replay stdin.jsonl\nstdin: hello\n"},
		{"compact transcript", []string{"compact", "--transcript", "s.jsonl", "--config", "a.toml", "--json"}, "", 0,
			"ctxd compact-transcript s.jsonl --config a.toml --json\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			e := &env{stdin: strings.NewReader(tt.stdin), stdout: &out, stderr: &errb,
				executable: func() (string, error) { return filepath.Join(dir, "ctxctl"), nil },
				lookPath:   func(string) (string, error) { return "", errors.New("not on PATH") },
			}
			code := runEnv(append([]string{"ctxctl"}, tt.args...), e)
			if code != tt.code || out.String() != tt.stdout || errb.String() != "to stderr\n" {
				t.Errorf("exit %d (want %d)\nstdout %q\nwant   %q\nstderr %q", code, tt.code, out.String(), tt.stdout, errb.String())
			}
		})
	}
}

func TestExecCtxdNotFound(t *testing.T) {
	for _, args := range [][]string{{"replay", "s.jsonl"}, {"compact", "--transcript", "s.jsonl"}} {
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb,
			executable: func() (string, error) { return filepath.Join(t.TempDir(), "ctxctl"), nil },
			lookPath:   func(string) (string, error) { return "", exec.ErrNotFound },
		}
		code := runEnv(append([]string{"ctxctl"}, args...), e)
		want := "ctxctl: ctxctl " + map[string]string{"replay": "replay", "compact": "compact --transcript"}[args[0]] +
			" runs the engine in the ctxd binary, which was not found next to ctxctl or on PATH: build both with `go build -o bin/ ./cmd/...`\n"
		if code != 1 || out.Len() != 0 || errb.String() != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q\nwant %q", args, code, out.String(), errb.String(), want)
		}
	}
}

func TestCompactUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"transcript with reason", []string{"compact", "--transcript", "f", "--reason", "overflow"}, "--reason and --no-wait apply to a session only"},
		{"transcript with session", []string{"compact", "--transcript", "f", "s1"}, "takes no arguments"},
		{"config without transcript", []string{"compact", "--config", "a.toml", "s1"}, "apply to --transcript only"},
		{"bad reason", []string{"compact", "--reason", "auto", "s1"}, `--reason "auto": want manual or overflow`},
		{"no session", []string{"compact"}, "compact takes SESSION"},
		{"replay without file", []string{"replay"}, "replay takes FILE"},
		{"import flag after file", []string{"import", "f.jsonl", "--session", "x"}, "flags must come before arguments"},
		{"bad format", []string{"session", "context", "--format", "xml", "s1"}, "want canonical, anthropic or openai"},
		{"doctor two sessions", []string{"doctor", "a", "b"}, "at most one SESSION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := ctxctl(t, tt.args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tt.msg) {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tt.msg)
			}
		})
	}
}

// TestBuiltBinaryFindsCtxd runs a built ctxctl: it finds ctxd next to
// itself first, else on PATH.
func TestBuiltBinaryFindsCtxd(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found:", err)
	}
	next, onPath, alone := t.TempDir(), t.TempDir(), t.TempDir()
	bin := filepath.Join(next, "ctxctl")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	writeFakeCtxd(t, next)
	writeFakeCtxd(t, onPath)
	if err := os.WriteFile(filepath.Join(onPath, "ctxd"), []byte("#!/bin/sh\necho \"path ctxd $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(alone, "ctxctl")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	runBin := func(bin, path string, args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "PATH="+path)
		out, err := cmd.Output()
		code := 0
		if x, ok := errors.AsType[*exec.ExitError](err); ok {
			code = x.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := runBin(bin, onPath, "replay", "exit-3.jsonl"); out != "ctxd replay exit-3.jsonl\n" || code != 3 {
		t.Errorf("next to ctxctl: %q, exit %d", out, code)
	}
	if out, code := runBin(lone, onPath, "replay", "--json", "s.jsonl"); out != "path ctxd replay s.jsonl --json\n" || code != 0 {
		t.Errorf("on PATH: %q, exit %d", out, code)
	}
	if out, code := runBin(lone, alone, "replay", "s.jsonl"); out != "" || code != 1 {
		t.Errorf("missing: %q, exit %d", out, code)
	}
}

// TestImportCompactContext: a transcript imported
// into a real daemon, then compacted and read: a valid, smaller context.
func TestImportCompactContext(t *testing.T) {
	d := startDaemon(t)
	for _, tc := range []struct{ id, file string }{
		{"demo", filepath.Join("..", "..", "testdata", "demo", "claude-code-session.jsonl")},
		{"cc", corpustest.Path(t, "claude-code/autocompact-150tools.jsonl")},
		{"pi", corpustest.Path(t, "pi/454tools-2compactions.jsonl")},
	} {
		t.Run(tc.id, func(t *testing.T) { importCompactContext(t, d, tc.id, tc.file) })
	}
}

func importCompactContext(t *testing.T, d *daemon, id, file string) {
	code, stdout, stderr := d.run(t, "import", "--session", id, file)
	if code != 0 || stdout != id+"\n" || !strings.Contains(stderr, "imported ") {
		t.Fatalf("import: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	ctx := context.Background()
	s, err := d.client.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Model == "" || s.LastSeq == 0 {
		t.Errorf("imported session: %+v", s)
	}
	// The largest recorded request is what the original agent sent.
	var maxUsage uint64
	_ = d.client.StreamEvents(ctx, id, api.EventsOptions{}, func(ev api.Event) error {
		if m := ev.Message; m != nil && m.Usage != nil {
			u := m.Usage
			maxUsage = max(maxUsage, u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens+u.OutputTokens)
		}
		return nil
	})
	if maxUsage == 0 {
		t.Fatal("no recorded usage in the imported events")
	}
	code, stdout, stderr = d.run(t, "compact", "--json", id)
	if code != 0 {
		t.Fatalf("compact: exit %d: %s", code, stderr)
	}
	var cr api.CompactResponse
	if err := jsonUnmarshal(stdout, &cr); err != nil || (cr.Status != api.CompactDone && cr.Status != api.CompactNothing) {
		t.Fatalf("compact: %q (%v)", stdout, err)
	}
	code, stdout, stderr = d.run(t, "session", "context", "--no-presend", id)
	if code != 0 {
		t.Fatalf("context: exit %d: %s", code, stderr)
	}
	var ctxr api.ContextResponse
	if err := jsonUnmarshal(stdout, &ctxr); err != nil {
		t.Fatalf("context is not JSON: %v", err)
	}
	if ctxr.CheckpointSeq == 0 || len(ctxr.Messages) == 0 || ctxr.Tokens.Value >= maxUsage {
		t.Errorf("context after compaction: checkpoint %d, %d messages, %d tokens (largest recorded request %d)",
			ctxr.CheckpointSeq, len(ctxr.Messages), ctxr.Tokens.Value, maxUsage)
	}
	// Every tool call in it is answered.
	open := map[string]bool{}
	for _, m := range ctxr.Messages {
		for _, b := range m.Content {
			if b.Type == api.BlockToolCall {
				open[b.ID] = true
			}
		}
		if m.Role == api.RoleTool {
			delete(open, m.ToolCallID)
		}
	}
	if len(open) > 0 {
		t.Errorf("unanswered tool calls in the context: %v", open)
	}

	// A second import under the same id is a conflict, reported as such.
	code, _, stderr = d.run(t, "import", "--session", id, file)
	if code != 1 || !strings.Contains(stderr, "create session") {
		t.Errorf("second import: exit %d, stderr %q", code, stderr)
	}
}

// TestEventsFollow: session events --follow prints events as they are
// written and ends cleanly (exit 0) when interrupted.
func TestEventsFollow(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	if _, err := d.client.CreateSession(ctx, api.CreateSessionRequest{ID: "f1", Model: "claude-sonnet-4-5"}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errb syncbuf.Buffer
	e := d.env(&out, &errb)
	e.ctx = runCtx
	done := make(chan int, 1)
	go func() { done <- runEnv([]string{"ctxctl", "session", "events", "--follow", "--json", "f1"}, e) }()
	if _, err := d.client.AppendMessages(ctx, "f1", api.AppendMessagesRequest{Messages: []api.Message{{Role: api.RoleUser, Content: text("hello")}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), `"hello"`) {
		if time.Now().After(deadline) {
			t.Fatalf("event not printed; stdout %q, stderr %q", out.String(), errb.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the output of a running stream
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after interrupt; stderr %q", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("follow did not end after its context was cancelled")
	}
}

func TestCompactTranscriptPassesLimitAndRefusesAFlagAsFile(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "ctxd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr strings.Builder
	code := run([]string{"ctxctl", "compact", "--transcript", "t.json", "--context-limit", "5000", "--data-dir", "d"}, &stdout, &stderr, os.Getenv)
	if code != 0 || stdout.String() != "compact-transcript t.json --context-limit 5000 --data-dir d\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	code = run([]string{"ctxctl", "compact", "--transcript", "--json", "t.json"}, &stdout, &stderr, os.Getenv)
	if code != 2 || !strings.Contains(stderr.String(), "--transcript needs a FILE") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
