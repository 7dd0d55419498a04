// Package agenttest runs real coding agents (Claude Code, pi, Codex CLI)
// non-interactively in tests, against a model endpoint on loopback (a fake
// provider, or ctxd's proxy in front of one), each in its own temporary HOME
// and configuration directories, with the agents' own switches for outside
// traffic turned off.
//
// The agents are installed by scripts/install-agents.sh, pinned, into a cache
// outside the repository (Dir). A test that needs an agent calls Bin (or
// Run.Exec, which calls it): where the agent is not installed the test skips
// with a message naming the script, except under CI=true, where it fails.
//
// Network isolation: the agents are not run in a network namespace
// (unshare -n), since the fake provider in the test process must stay
// reachable on the host's loopback. Instead every run gets the agents'
// documented switches (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC,
// PI_OFFLINE…) and HTTP(S)_PROXY set to a closed loopback port with NO_PROXY
// for loopback, so an outside attempt by a client that honours the proxy
// variables fails at once instead of leaving the machine.
package agenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// Agent names a supported agent by its executable.
type Agent string

// The agents the harness runs.
const (
	ClaudeCode Agent = "claude"
	Pi         Agent = "pi"
	Codex      Agent = "codex"
)

// Pin is the npm package and version of an agent, as scripts/install-agents.sh
// installs it. Change both together.
type Pin struct {
	Package, Version string
}

// Pins are the pinned versions (the ones docs/testing.md
// describes).
var Pins = map[Agent]Pin{
	ClaudeCode: {"@anthropic-ai/claude-code", "2.1.197"},
	Pi:         {"@mariozechner/pi-coding-agent", "0.73.1"},
	Codex:      {"@openai/codex", "0.171.0"},
}

// Dir is the agents' cache directory: $CTXD_AGENTS_DIR, else
// $XDG_CACHE_HOME/ctxd/agents, else ~/.cache/ctxd/agents (the script's rule).
func Dir() string {
	if d := os.Getenv("CTXD_AGENTS_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "ctxd", "agents")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "ctxd", "agents")
}

// Path returns the path of agent a's executable in the cache and whether it
// is installed (the script's .installed mark and an executable file).
func Path(a Agent) (string, bool) {
	pin, ok := Pins[a]
	if !ok {
		return "", false
	}
	dir := filepath.Join(Dir(), pin.Package+"@"+pin.Version)
	exe := filepath.Join(dir, "node_modules", ".bin", string(a))
	if _, err := os.Stat(filepath.Join(dir, ".installed")); err != nil {
		return exe, false
	}
	fi, err := os.Stat(exe)
	return exe, err == nil && fi.Mode()&0o111 != 0
}

// Bin returns the path of agent a's executable. When it is not installed,
// Bin skips tb with a message saying how to install it (npm missing, or run
// scripts/install-agents.sh), or fails tb when CI is "true". With go test
// -short it skips tb (the real-agent runs take minutes), unless CI is "true".
func Bin(tb testing.TB, a Agent) string {
	tb.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		tb.Skip("real-agent test skipped with -short")
		return ""
	}
	exe, ok := Path(a)
	if ok && a == Pi {
		if _, err := exec.LookPath("node"); err != nil {
			ok = false
			exe = "node (needed by pi) not found on PATH"
		}
	}
	if ok {
		return exe
	}
	var msg string
	if _, err := exec.LookPath("npm"); err != nil {
		msg = fmt.Sprintf("real-agent test needs %s: npm not found, so scripts/install-agents.sh cannot install it", a)
	} else {
		msg = fmt.Sprintf("real-agent test needs %s (%s): run scripts/install-agents.sh", a, exe)
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
		return ""
	}
	tb.Skip(msg)
	return ""
}

// Run is one non-interactive agent run. Zero fields take the defaults named
// on them.
type Run struct {
	Agent Agent
	// BaseURL is the model endpoint, "http://127.0.0.1:PORT" (no /v1): the
	// Anthropic base URL for Claude Code and pi's anthropic-messages
	// provider; "/v1" is appended for Codex and pi's openai provider.
	BaseURL string
	// Prompt is the task given on the command line.
	Prompt string
	// Home is the agent's HOME (and where Claude Code writes its
	// transcripts). Default a new t.TempDir(); pass the same one with
	// Continue to resume a session.
	Home string
	// WorkDir is the agent's working directory. Default a new t.TempDir().
	WorkDir string
	// Model is the model name sent. Defaults: claude-opus-4-8 (Claude Code,
	// 200k window), claude-local-1 (pi, anthropic-messages), gpt-local-1 (pi,
	// OpenAI), gpt-5.2-codex (Codex). "default" gives Claude Code and Codex
	// no model flag: their own default model (Claude Code's with the
	// context-1m beta, Codex's gpt-6.2-sol in code mode).
	Model string
	// Thinking is pi's --thinking level (default "medium"; "off" disables).
	Thinking string
	// PiAPI is pi's provider API: "anthropic-messages" (default) or
	// "openai-completions".
	PiAPI string
	// ContextWindow is the window pi's models.json declares. Default 200000.
	ContextWindow int
	// APIKey is the credential the agent sends. Default "sk-ant-test" /
	// "sk-test".
	APIKey string
	// Continue resumes the previous session in Home and WorkDir (Claude Code
	// --continue, pi --continue).
	Continue bool
	// Timeout bounds the run; the agent's process group is killed at its end.
	// Default 90s.
	Timeout time.Duration
	// Env adds KEY=VALUE entries to the agent's environment.
	Env []string
	// WebSockets makes Codex's provider declare supports_websockets, as
	// OpenAI's own provider does: Codex then opens a WebSocket on GET
	// /v1/responses before it uses HTTP.
	WebSockets bool
}

// Result is what a run left.
type Result struct {
	// ExitCode is the agent's exit status (-1 when a signal killed it or it
	// could not start).
	ExitCode int
	// TimedOut is set when Timeout killed the agent.
	TimedOut       bool
	Stdout, Stderr string
	// Transcript is the newest session file the agent wrote under its
	// directories ("" when none): Claude Code's ~/.claude/projects/…/*.jsonl,
	// pi's sessions/…/*.jsonl, Codex's sessions/…/rollout-*.jsonl.
	Transcript string
	// Home and WorkDir are the directories used (to pass to a Continue run).
	Home, WorkDir string
	// Duration is how long the agent ran.
	Duration time.Duration
}

// Exec runs r, skipping or failing tb as Bin does when the agent is not
// installed. An agent that fails is not a test failure: the Result says so.
// Exec fails tb only when the run cannot be set up.
func (r Run) Exec(tb testing.TB) Result {
	tb.Helper()
	exe := Bin(tb, r.Agent)
	if r.Home == "" {
		r.Home = tb.TempDir()
	}
	if r.WorkDir == "" {
		r.WorkDir = tb.TempDir()
	}
	if r.Timeout == 0 {
		r.Timeout = 90 * time.Second
	}
	tmp := filepath.Join(r.Home, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		tb.Fatal(err)
	}
	env := []string{
		"HOME=" + r.Home,
		"PATH=" + os.Getenv("PATH"),
		"TMPDIR=" + tmp,
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
		// Outside traffic fails at once for clients honouring proxy variables.
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9",
		"http_proxy=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
		"NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1",
	}
	args, extraEnv, err := r.command()
	if err != nil {
		tb.Fatal(err)
	}
	env = append(append(env, extraEnv...), r.Env...)

	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = r.WorkDir
	cmd.Env = env // not the test's environment: no real keys or base URLs leak in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The agent's own children (its shell tool) die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	res := Result{
		Stdout: stdout.String(), Stderr: stderr.String(), Home: r.Home, WorkDir: r.WorkDir,
		Duration: time.Since(start), TimedOut: ctx.Err() != nil,
	}
	if cmd.Process != nil {
		// Whatever the agent left running in its group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(runErr, &ee):
		res.ExitCode = ee.ExitCode()
	case runErr != nil:
		res.ExitCode = -1
	}
	res.Transcript = r.transcript()
	return res
}

func (r Run) piDir() string    { return filepath.Join(r.Home, ".pi-agent") }
func (r Run) codexDir() string { return filepath.Join(r.Home, ".codex") }

// command returns the agent's arguments and environment (and writes its
// configuration files), following docs/testing.md.
func (r Run) command() ([]string, []string, error) {
	switch r.Agent {
	case ClaudeCode:
		args := []string{"-p", r.Prompt, "--output-format", "stream-json", "--verbose",
			"--dangerously-skip-permissions"}
		if r.Model != "default" {
			args = append(args, "--model", or(r.Model, "claude-opus-4-8"))
		}
		if r.Continue {
			args = append(args, "--continue")
		}
		return args, []string{
			"ANTHROPIC_BASE_URL=" + r.BaseURL,
			"ANTHROPIC_API_KEY=" + or(r.APIKey, "sk-ant-test"),
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
			"DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "IS_SANDBOX=1",
		}, nil
	case Pi:
		dir := r.piDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		window := r.ContextWindow
		if window == 0 {
			window = 200000
		}
		thinking := or(r.Thinking, "medium")
		api := or(r.PiAPI, "anthropic-messages")
		provider, model, base, key := "local-anthropic", or(r.Model, "claude-local-1"), r.BaseURL, or(r.APIKey, "sk-ant-test")
		if api != "anthropic-messages" {
			provider, model, base, key = "local-openai", or(r.Model, "gpt-local-1"), r.BaseURL+"/v1", or(r.APIKey, "sk-test")
		}
		prov := map[string]any{
			"baseUrl": base, "api": api, "apiKey": key,
			"models": []any{map[string]any{
				"id": model, "name": "local", "reasoning": thinking != "off", "input": []string{"text"},
				"contextWindow": window, "maxTokens": 32000,
			}},
		}
		if api != "anthropic-messages" {
			prov["compat"] = map[string]any{"sendSessionAffinityHeaders": true}
		}
		b, _ := json.MarshalIndent(map[string]any{"providers": map[string]any{provider: prov}}, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "models.json"), b, 0o644); err != nil {
			return nil, nil, err
		}
		args := []string{"-p", "--provider", provider, "--model", model, "--thinking", thinking}
		if r.Continue {
			args = append(args, "--continue")
		}
		args = append(args, r.Prompt)
		return args, []string{
			"PI_CODING_AGENT_DIR=" + dir, "PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1", "PI_TELEMETRY=0",
		}, nil
	case Codex:
		dir := r.codexDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		conf := fmt.Sprintf(`model_provider = "local"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
[model_providers.local]
name = "local"
base_url = %q
env_key = "LOCAL_OPENAI_KEY"
wire_api = "responses"
supports_websockets = %t
[analytics]
enabled = false
[feedback]
enabled = false
[features]
plugins = false
remote_plugin = false
`, r.BaseURL+"/v1", r.WebSockets)
		if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o644); err != nil {
			return nil, nil, err
		}
		args := []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"}
		if r.Model != "default" {
			args = append(args, "-m", or(r.Model, "gpt-5.2-codex"))
		}
		if r.Continue {
			args = append(args, "resume", "--last")
		}
		args = append(args, r.Prompt)
		return args, []string{"CODEX_HOME=" + dir, "LOCAL_OPENAI_KEY=" + or(r.APIKey, "sk-test")}, nil
	}
	return nil, nil, fmt.Errorf("agenttest: unknown agent %q", r.Agent)
}

// transcript finds the newest session file the agent wrote.
func (r Run) transcript() string {
	var root, pattern string
	switch r.Agent {
	case ClaudeCode:
		root, pattern = filepath.Join(r.Home, ".claude", "projects"), "*.jsonl"
	case Pi:
		root, pattern = filepath.Join(r.piDir(), "sessions"), "*.jsonl"
	case Codex:
		root, pattern = filepath.Join(r.codexDir(), "sessions"), "rollout-*.jsonl"
	}
	var best string
	var bestTime time.Time
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		// Claude Code keeps sub-agent transcripts in a subagents/ folder.
		if strings.Contains(p, string(filepath.Separator)+"subagents"+string(filepath.Separator)) {
			return nil
		}
		if ok, _ := filepath.Match(pattern, d.Name()); !ok {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.ModTime().After(bestTime) {
			best, bestTime = p, fi.ModTime()
		}
		return nil
	})
	return best
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ClaudeResult is the final "result" event of Claude Code's stream-json
// output.
type ClaudeResult struct {
	Subtype        string `json:"subtype"`
	IsError        bool   `json:"is_error"`
	Result         string `json:"result"`
	APIErrorStatus int    `json:"api_error_status"`
	TerminalReason string `json:"terminal_reason"`
	NumTurns       int    `json:"num_turns"`
	SessionID      string `json:"session_id"`
}

// Claude returns the result event of a Claude Code run's stdout, and false
// when there is none (the agent died before it, or another agent ran).
func (r Result) Claude() (ClaudeResult, bool) {
	lines := strings.Split(r.Stdout, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var ev struct {
			Type string `json:"type"`
			ClaudeResult
		}
		if json.Unmarshal([]byte(lines[i]), &ev) == nil && ev.Type == "result" {
			return ev.ClaudeResult, true
		}
	}
	return ClaudeResult{}, false
}

// FinalText is the agent's final answer: Claude Code's result text, or the
// whole of stdout for pi and Codex (their print modes print only the answer).
func (r Result) FinalText() string {
	if c, ok := r.Claude(); ok {
		return c.Result
	}
	return strings.TrimSpace(r.Stdout)
}

// Log writes a run's outcome to tb's log: exit status, duration, transcript,
// every request p recorded (sequence, path, status, step, tokens, prompt-cache
// read, refusal text) and the last 1,500 bytes of stdout and stderr. p may be
// nil.
func Log(tb testing.TB, res Result, p *fakeprovider.Provider) {
	tb.Helper()
	tb.Logf("exit %d (timed out %v) in %v; transcript %s", res.ExitCode, res.TimedOut, res.Duration.Round(time.Millisecond), res.Transcript)
	if p != nil {
		for _, r := range p.Requests() {
			tb.Logf("  request %d %s %s: %d %s tokens=%d cache_read=%d %s", r.Seq, r.Method, r.Path, r.Status, r.Step, r.Tokens, r.CacheRead, r.Error)
		}
	}
	tail := func(s string) string { return s[max(0, len(s)-1500):] }
	tb.Logf("stdout tail: %s\nstderr tail: %s", tail(res.Stdout), tail(res.Stderr))
}
