package agenttest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// anthropicAgents are the agents that speak Anthropic Messages: Claude Code,
// and pi with its anthropic-messages provider and thinking on ("medium").
var anthropicAgents = []Agent{ClaudeCode, Pi}

// agentCase is one agent on one wire API.
type agentCase struct {
	name string
	run  Run // Agent and PiAPI set
}

// allAgents are the agent/API pairs: Claude Code and pi on Anthropic
// Messages (pi with thinking "medium", and once with thinking off), Codex on the Responses API (function tools with gpt-5.2-codex,
// and its default model's code mode: a free-form JavaScript "exec" tool
// declared in an additional_tools input item), pi on Chat Completions.
var allAgents = []agentCase{
	{"claude", Run{Agent: ClaudeCode}},
	{"pi", Run{Agent: Pi}},
	{"pi-nothink", Run{Agent: Pi, Thinking: "off"}},
	{"codex", Run{Agent: Codex}},
	{"codex-code", Run{Agent: Codex, Model: "default"}},
	{"pi-openai", Run{Agent: Pi, PiAPI: "openai-completions"}},
}

// signedReasoning counts the thinking blocks (Anthropic) or reasoning items
// (Responses) of a request that carry the fake's signature of their text:
// the fake's own, returned verbatim.
func signedReasoning(t *testing.T, r fakeprovider.Request) int {
	n := 0
	for _, m := range r.Parsed.Messages {
		for _, b := range m.Content.Blocks {
			if b.Type == "thinking" && b.Signature == fakeprovider.Sign(b.Thinking) {
				n++
			}
		}
	}
	var body struct {
		Input []struct {
			Type    string `json:"type"`
			Summary []struct {
				Text string `json:"text"`
			} `json:"summary"`
			EncryptedContent string `json:"encrypted_content"`
		} `json:"input"`
	}
	if json.Unmarshal(r.Body, &body) == nil {
		for _, it := range body.Input {
			if it.Type == "reasoning" && len(it.Summary) == 1 && it.EncryptedContent == fakeprovider.Sign(it.Summary[0].Text) {
				n++
			}
		}
	}
	return n
}

// TestAgentFinishesTask runs each agent on the fake's small scripted task
// (two shell rounds, a file write, a final answer): the agent exits 0 with
// the marker in its answer and its transcript, writes the file, the fake
// refuses nothing, every task request extends the one before (markers
// normalized) and carries the agent's session identity. The agents that reason (Claude Code, pi on Anthropic with
// thinking on, Codex) return the fake's signed thinking blocks or reasoning
// items.
func TestAgentFinishesTask(t *testing.T) {
	for _, ac := range allAgents {
		t.Run(ac.name, func(t *testing.T) {
			t.Parallel() // the agents mostly wait on the fake
			marker := "CTXD-DONE-" + strings.ToUpper(ac.name)
			p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 2, OutputBytes: 4000, Marker: marker})
			run := ac.run
			run.BaseURL, run.Prompt = p.URL(), "Run the scripted task."
			res := run.Exec(t)
			Log(t, res, p)
			if res.ExitCode != 0 || res.TimedOut {
				t.Fatalf("exit %d, timed out %v", res.ExitCode, res.TimedOut)
			}
			if !strings.Contains(res.FinalText(), marker) {
				t.Fatalf("final answer %q lacks %s", res.FinalText(), marker)
			}
			if n := len(p.Refused()); n != 0 {
				t.Fatalf("%d refused requests, first: %s", n, p.Refused()[0].Error)
			}
			got, err := os.ReadFile(filepath.Join(res.WorkDir, "ctxd-fake-output.txt"))
			if err != nil || string(got) != "written by the fake provider\n" {
				t.Fatalf("file written by the task: %q %v", got, err)
			}
			if res.Transcript == "" {
				t.Fatal("no transcript found")
			}
			if tr, err := os.ReadFile(res.Transcript); err != nil || !strings.Contains(string(tr), marker) {
				t.Fatalf("transcript %s lacks the marker (%v)", res.Transcript, err)
			}
			main := p.Messages(true)
			steps := map[string]int{}
			for _, r := range main {
				steps[r.Step]++
			}
			if steps[fakeprovider.StepShell] != 2 || steps[fakeprovider.StepWrite] != 1 || steps[fakeprovider.StepFinal] != 1 {
				t.Errorf("task steps %v, want 2 shell, 1 write, 1 final", steps)
			}
			if err := fakeprovider.CheckChain(main); err != nil {
				t.Errorf("the agent's own requests do not extend each other: %v", err)
			}
			checkIdentity(t, ac, res, main)
			if ac.run.Agent != Codex && ac.run.PiAPI == "" {
				// The agent's cache markers: each request reads from the
				// fake's prompt cache nearly all of the one before.
				for i := 1; i < len(main); i++ {
					if main[i].CacheRead < main[i-1].Tokens*9/10 {
						t.Errorf("request %d read %d tokens from the prompt cache; the one before had %d", main[i].Seq, main[i].CacheRead, main[i-1].Tokens)
					}
				}
			}
			if ac.name == "pi-openai" {
				return // Chat Completions carries no reasoning back
			}
			if ac.run.Thinking == "off" {
				for _, r := range main {
					if r.Parsed.Enabled() || signedReasoning(t, r) != 0 {
						t.Fatalf("request %d: thinking %+v with thinking off", r.Seq, r.Parsed.Thinking)
					}
				}
				return
			}
			last := main[len(main)-1]
			if ac.run.Agent != Codex && !last.Parsed.Enabled() {
				t.Fatalf("thinking not enabled (thinking %+v)", last.Parsed.Thinking)
			}
			if n := signedReasoning(t, last); n < 2 {
				t.Errorf("the last request carries %d of the fake's signed thinking blocks or reasoning items, want them returned", n)
			}
		})
	}
}

// identityHeader is the header that carries each agent's session id
// (docs/testing.md), "" for pi on Anthropic Messages, which sends
// none.
var identityHeader = map[string]string{
	"claude": "X-Claude-Code-Session-Id", "codex": "Session-Id", "codex-code": "Session-Id", "pi-openai": "Session_id",
}

// checkIdentity checks what a proxy identifies a session by: the agent's
// session header is the same on every task request (Claude Code's also equals
// its result's session_id and the session_id inside metadata.user_id; pi's
// Chat one equals x-session-affinity; Codex's names its rollout file).
func checkIdentity(t *testing.T, ac agentCase, res Result, main []fakeprovider.Request) {
	t.Helper()
	h := identityHeader[ac.name]
	if h == "" {
		for _, k := range []string{"X-Claude-Code-Session-Id", "Session-Id", "Session_id"} {
			if v := main[0].Header.Get(k); v != "" {
				t.Errorf("%s sent an identity header %s: %s", ac.name, k, v)
			}
		}
		return
	}
	id := main[0].Header.Get(h)
	if id == "" {
		t.Fatalf("no %s header", h)
	}
	for _, r := range main {
		if got := r.Header.Get(h); got != id {
			t.Fatalf("request %d: %s %q, the first request's %q", r.Seq, h, got, id)
		}
	}
	switch ac.name {
	case "claude":
		var meta struct {
			Metadata struct {
				UserID string `json:"user_id"`
			} `json:"metadata"`
		}
		var user struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal(main[0].Body, &meta)
		_ = json.Unmarshal([]byte(meta.Metadata.UserID), &user)
		if c, _ := res.Claude(); c.SessionID != id || user.SessionID != id {
			t.Errorf("session ids: header %s, result %s, metadata.user_id %s", id, c.SessionID, user.SessionID)
		}
	case "pi-openai":
		if a := main[0].Header.Get("X-Session-Affinity"); a != id {
			t.Errorf("x-session-affinity %q, session_id %q", a, id)
		}
	default:
		if !strings.Contains(filepath.Base(res.Transcript), id) {
			t.Errorf("rollout %s does not carry the session id %s", res.Transcript, id)
		}
	}
}

// TestAgentOverflowWithoutCtxd is the baseline the proxy tests compare to:
// a shell output overflows the fake's window (the agent's first request plus
// 3000 tokens), the agent gets the real context-length 400 and never reaches
// the final answer. Claude Code gives up (exit 1, result "Prompt is too
// long"); Codex gives up (exit 1, "ran out of room in the model's context
// window"); pi, on either API, tries its own compaction, gets the 400 again,
// records the error in its transcript and exits 0 with no answer.
func TestAgentOverflowWithoutCtxd(t *testing.T) {
	for _, ac := range allAgents {
		t.Run(ac.name, func(t *testing.T) {
			t.Parallel() // the agents mostly wait on the fake
			marker := "CTXD-DONE-" + strings.ToUpper(ac.name)
			p := fakeprovider.Start(t, fakeprovider.Config{Headroom: 3000, Rounds: 2, OutputBytes: 25000, Marker: marker})
			run := ac.run
			run.BaseURL, run.Prompt = p.URL(), "Run the scripted task."
			res := run.Exec(t)
			Log(t, res, p)
			if res.TimedOut {
				t.Fatal("timed out")
			}
			tooLong := 0
			for _, r := range p.Refused() {
				if strings.HasPrefix(r.Error, "prompt is too long: ") || strings.Contains(r.Error, "context window") ||
					strings.Contains(r.Error, "maximum context length") {
					tooLong++
				}
			}
			if tooLong == 0 {
				t.Fatalf("the fake refused no request as too long (window %d)", p.Window())
			}
			if strings.Contains(res.Stdout, marker) {
				t.Fatal("the agent reached the final answer despite the overflow")
			}
			switch ac.name {
			case "claude":
				c, ok := res.Claude()
				if res.ExitCode != 1 || !ok || !c.IsError || c.APIErrorStatus != 400 || c.Result != "Prompt is too long" {
					t.Fatalf("Claude Code: exit %d, result %+v; want exit 1 and the 400 reported", res.ExitCode, c)
				}
			case "codex", "codex-code":
				if res.ExitCode != 1 || !strings.Contains(res.Stderr, "ran out of room in the model's context window") {
					t.Fatalf("Codex: exit %d; want exit 1 and the error on stderr", res.ExitCode)
				}
			case "pi", "pi-nothink", "pi-openai":
				want := map[string]string{"pi": "prompt is too long", "pi-nothink": "prompt is too long", "pi-openai": "maximum context length"}[ac.name]
				tr, err := os.ReadFile(res.Transcript)
				if err != nil || !strings.Contains(string(tr), want) {
					t.Fatalf("pi's transcript %q does not record the 400 %q (%v)", res.Transcript, want, err)
				}
				if res.ExitCode != 0 || res.FinalText() != "" {
					t.Fatalf("pi: exit %d, answer %q; want exit 0 and no answer", res.ExitCode, res.FinalText())
				}
			}
		})
	}
}

// recTB records Skip and Fatal instead of stopping the test.
type recTB struct {
	testing.TB
	skipped, failed string
}

func (r *recTB) Helper()           {}
func (r *recTB) Skip(args ...any)  { r.skipped = fmt.Sprint(args...) }
func (r *recTB) Fatal(args ...any) { r.failed = fmt.Sprint(args...) }

// TestBinWhenMissing checks the rule for an agent not installed: skip with a
// message naming the install script, or fail under CI=true.
func TestBinWhenMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("with -short Bin skips before it looks for the agent")
	}
	t.Setenv("CTXD_AGENTS_DIR", t.TempDir())
	t.Setenv("CI", "")
	r := &recTB{}
	if got := Bin(r, ClaudeCode); got != "" || r.failed != "" || !strings.Contains(r.skipped, "install-agents.sh") {
		t.Fatalf("without CI: returned %q, skipped %q, failed %q", got, r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	r = &recTB{}
	if Bin(r, Pi); r.skipped != "" || !strings.Contains(r.failed, "pi") {
		t.Fatalf("under CI: skipped %q, failed %q", r.skipped, r.failed)
	}
}

// TestInstallScript checks scripts/install-agents.sh: with the agents in the
// cache a second run needs no npm (nothing is fetched) and prints each
// executable; with an empty cache and no npm it fails saying so.
func TestInstallScript(t *testing.T) {
	for _, a := range []Agent{ClaudeCode, Pi, Codex} {
		Bin(t, a)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "install-agents.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// A PATH with mkdir only: no npm, no node.
	bin := t.TempDir()
	mkdir, err := exec.LookPath("mkdir")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mkdir, filepath.Join(bin, "mkdir")); err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir string) (string, error) {
		cmd := exec.Command(bash, script)
		cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir(), "CTXD_AGENTS_DIR=" + dir}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(Dir())
	if err != nil {
		t.Fatalf("second run with the agents cached: %v\n%s", err, out)
	}
	for _, a := range []Agent{ClaudeCode, Pi, Codex} {
		exe, _ := Path(a)
		if !strings.Contains(out, string(a)+" "+exe+"\n") {
			t.Errorf("output lacks %q:\n%s", string(a)+" "+exe, out)
		}
	}
	out, err = run(t.TempDir())
	if err == nil || !strings.Contains(out, "npm not found") {
		t.Fatalf("empty cache, no npm: err %v\n%s", err, out)
	}
}

// TestAgentContinues runs two turns of one session, the second with
// --continue in the same HOME and working directory (the harness's Continue):
// both finish, and the second turn's first request resends the first turn's
// conversation (it extends the first turn's last request), which is what a
// proxy restarted between the turns must be able to match.
func TestAgentContinues(t *testing.T) {
	for _, a := range anthropicAgents {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel() // the agents mostly wait on the fake
			p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 1, OutputBytes: 1000, Marker: "CTXD-TURN-DONE"})
			first := Run{Agent: a, BaseURL: p.URL(), Prompt: "Run the scripted task."}.Exec(t)
			n := len(p.Messages(true))
			second := Run{Agent: a, BaseURL: p.URL(), Prompt: "Run it once more.", Home: first.Home, WorkDir: first.WorkDir, Continue: true}.Exec(t)
			Log(t, second, p)
			for i, res := range []Result{first, second} {
				if res.ExitCode != 0 || !strings.Contains(res.FinalText(), "CTXD-TURN-DONE") {
					t.Fatalf("turn %d: exit %d, answer %q", i+1, res.ExitCode, res.FinalText())
				}
			}
			main := p.Messages(true)
			if len(main) <= n {
				t.Fatalf("no task request in the second turn")
			}
			if err := fakeprovider.Extends(main[n-1].Body, main[n].Body); err != nil {
				t.Fatalf("the resumed session's first request does not extend the first turn's last: %v", err)
			}
			if len(main[n].Parsed.Messages) <= len(main[n-1].Parsed.Messages)+1 {
				t.Fatalf("the second turn's first request has %d messages, the first turn's last %d", len(main[n].Parsed.Messages), len(main[n-1].Parsed.Messages))
			}
			if len(p.Refused()) != 0 {
				t.Fatalf("refused: %s", p.Refused()[0].Error)
			}
		})
	}
}

// TestAgentRetriesMidStreamError shows what the agents do with an error in
// the middle of a stream (an "overloaded_error" event after message_start):
// they resend the same request (the same conversation, markers normalized)
// and finish the task. A proxy must pass the error event through and treat
// the resend as the same request.
func TestAgentRetriesMidStreamError(t *testing.T) {
	for _, a := range anthropicAgents {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel() // the agents mostly wait on the fake
			p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 1, OutputBytes: 1000, Marker: "CTXD-RETRIED"})
			p.FailNext(fakeprovider.Fault{Status: 529, MidStream: true})
			res := Run{Agent: a, BaseURL: p.URL(), Prompt: "Run the scripted task."}.Exec(t)
			Log(t, res, p)
			if res.ExitCode != 0 || !strings.Contains(res.FinalText(), "CTXD-RETRIED") {
				t.Fatalf("exit %d, answer %q", res.ExitCode, res.FinalText())
			}
			main := p.Messages(true)
			if len(main) < 2 || main[0].Step != fakeprovider.StepFault || main[1].Step != fakeprovider.StepShell {
				t.Fatalf("requests %v: want the fault, then the task", main)
			}
			if err := fakeprovider.Extends(main[0].Body, main[1].Body); err != nil {
				t.Fatalf("the retry is not the same request: %v", err)
			}
			if err := fakeprovider.Extends(main[1].Body, main[0].Body); err != nil {
				t.Fatalf("the retry is not the same request: %v", err)
			}
		})
	}
}
