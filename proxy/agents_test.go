package proxy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/agenttest"
	"github.com/ctxd/ctxd/internal/fakeprovider"
	"github.com/ctxd/ctxd/replay"
	"github.com/ctxd/ctxd/transcript"
)

// openAIAgents are the real agents on the OpenAI wire APIs: Codex CLI on
// the Responses API with function tools (gpt-5.2-codex) and in its default
// code mode (a free-form exec tool declared in an additional_tools item),
// and pi on Chat Completions. base is about the fake's token count of the
// agent's first request (its system prompt and tools), measured with
// fakeprovider; the fake's window is base plus 3000 tokens, so one 25 KB
// shell output overflows it (TestAgentOverflowWithoutCtxd shows each agent
// failing there without ctxd).
var openAIAgents = []struct {
	name  string
	run   agenttest.Run
	model string
	base  int
}{
	{"codex", agenttest.Run{Agent: agenttest.Codex}, "gpt-5.2-codex", 9800},
	{"codex-code", agenttest.Run{Agent: agenttest.Codex, Model: "default"}, "", 15000},
	{"pi-openai", agenttest.Run{Agent: agenttest.Pi, PiAPI: "openai-completions"}, "gpt-local-1", 1400},
}

// codexDefaultModels are the names Codex 0.171.0 sends without -m; the
// daemon's catalog gets the fake's window for each.
var codexDefaultModels = []string{"gpt-6.2-sol", "gpt-5.5", "gpt-5.4", "gpt-5.3-codex", "gpt-5.2"}

// TestOpenAIAgentsOverflowThroughCtxd: the overflowing task of
// TestAgentOverflowWithoutCtxd (two 25 KB shell outputs into a window 3000
// tokens over the agent's first request) fails without ctxd (Codex exits 1
// with "ran out of room in the model's context window"; pi ends without an
// answer); run by the real agent with its
// base URL pointed at ctxd's proxy and ctxd's upstream at the strict fake
// provider, finishes: the final answer, the file written, exit 0, and no
// refusal the client saw (an upstream refusal only as an overflow ctxd
// recovered: a slow machine may not have the prepared summary ready, and
// compaction never makes the agent wait). Between two of ctxd's rewrites each
// upstream request extends the one before it byte for byte; every request
// is managed (none passed through); Codex's rollout written through ctxd
// replays with `ctxctl replay` (replay.Run). Under CI=true the agents must
// be installed (agenttest.Bin fails instead of skipping).
func TestOpenAIAgentsOverflowThroughCtxd(t *testing.T) {
	for _, ac := range openAIAgents {
		t.Run(ac.name, func(t *testing.T) {
			t.Parallel() // the agents mostly wait on the fake
			agenttest.Bin(t, ac.run.Agent)
			marker := "CTXD-DONE-" + strings.ToUpper(ac.name)
			window := ac.base + 3000
			p := fakeprovider.Start(t, fakeprovider.Config{WindowTokens: window, Rounds: 2, OutputBytes: 25000, Marker: marker})
			cfg := testConfig()
			cfg.ContextCompaction.KeepRecentTokens = 1000
			// The threshold 1,500 tokens under the window: with the default
			// 70 %, Codex's code-mode prefix (instructions and
			// additional_tools, ~13k of the 18k window) alone is over it and
			// the engine rightly calls compaction futile.
			cfg.ContextCompaction.Trigger = config.Trigger{BufferTokens: 1500}
			cfg.Proxy.Upstreams.OpenAI.BaseURL = p.URL()
			models := []string{ac.model}
			if ac.model == "" {
				models = codexDefaultModels
			}
			for _, m := range models {
				cfg.Models[m] = config.Model{ContextLimit: uint64(window), TokenFactor: 1}
			}
			// Without ctxd, the same task against the same fake fails.
			direct := fakeprovider.Start(t, fakeprovider.Config{WindowTokens: window, Rounds: 2, OutputBytes: 25000, Marker: marker})
			base := ac.run
			base.BaseURL, base.Prompt, base.Timeout = direct.URL(), "Run the scripted task.", 180e9
			bres := base.Exec(t)
			if strings.Contains(bres.Stdout, marker) || len(direct.Refused()) == 0 {
				agenttest.Log(t, bres, direct)
				t.Fatalf("without ctxd the task did not overflow (window %d, %d refusals)", window, len(direct.Refused()))
			}
			if ac.run.Agent == agenttest.Codex && (bres.ExitCode != 1 || !strings.Contains(bres.Stderr, "ran out of room in the model's context window")) {
				t.Fatalf("without ctxd Codex: exit %d; want exit 1 and the context-window error", bres.ExitCode)
			}
			t.Logf("without ctxd: exit %d, %d upstream refusals (first: %s)", bres.ExitCode, len(direct.Refused()), direct.Refused()[0].Error)

			f := newFixture(t, cfg)
			run := ac.run
			run.BaseURL, run.Prompt = f.url, "Run the scripted task."
			run.Timeout = 180e9
			res := run.Exec(t)
			agenttest.Log(t, res, p)
			if res.ExitCode != 0 || res.TimedOut {
				t.Fatalf("exit %d, timed out %v; proxy logs:\n%s", res.ExitCode, res.TimedOut, tail(f.logs.String()))
			}
			if !strings.Contains(res.FinalText(), marker) {
				t.Fatalf("final answer %q lacks %s", res.FinalText(), marker)
			}
			if got, err := os.ReadFile(filepath.Join(res.WorkDir, "ctxd-fake-output.txt")); err != nil || string(got) != "written by the fake provider\n" {
				t.Fatalf("file written by the task: %q %v", got, err)
			}
			// A compaction never makes the agent wait: when the machine
			// is slow, the prepared summary may not be ready for the
			// request that crosses the window, which then goes out as it
			// is; its refusal is recovered by ctxd (the client never sees
			// it). So refusals are allowed only as recovered overflows.
			st := f.p.Stats()
			if r := p.Refused(); uint64(len(r)) > st.Overflows {
				t.Fatalf("%d upstream refusals, %d recovered as overflows; first %d: %s", len(r), st.Overflows, r[0].Status, r[0].Error)
			} else if len(r) > 0 {
				t.Logf("%d upstream refusals, each recovered (%d overflows)", len(r), st.Overflows)
			}
			if st.PassedThrough != 0 || st.Violations != 0 || st.Managed == 0 {
				t.Fatalf("proxy stats %+v; logs:\n%s", st, tail(f.logs.String()))
			}
			// Byte extension between rewrites: a request that does not
			// extend the one before follows a compaction of its session.
			var main []fakeprovider.Request
			for _, r := range p.Messages(true) {
				if r.Step != fakeprovider.StepSummary {
					main = append(main, r)
				}
			}
			ids, _ := f.eng.ListSessions(context.Background())
			comps := 0
			for _, id := range ids {
				comps += countCompactions(t, f, id)
			}
			breaks := 0
			for i := 1; i < len(main); i++ {
				if err := fakeprovider.Extends(main[i-1].Body, main[i].Body); err != nil {
					breaks++
					t.Logf("request %d rewrites request %d: %v", main[i].Seq, main[i-1].Seq, err)
				}
			}
			t.Logf("%d task requests, %d compactions, %d rewrites, stats %+v", len(main), comps, breaks, st)
			if breaks > comps {
				t.Errorf("%d requests do not extend the one before, but only %d compactions rewrote the context", breaks, comps)
			}
			if comps == 0 && st.Overflows == 0 {
				t.Logf("no compaction was needed (the offload layer kept the task in the window)")
			}
			// Who pays: a Codex session is summarized
			// through its own upstream's Responses API.
			for _, r := range p.Messages(false) {
				if r.Step == fakeprovider.StepSummary && ac.run.Agent == agenttest.Codex && r.Path != "/v1/responses" {
					t.Errorf("request %d: Codex's summary went to %s", r.Seq, r.Path)
				}
			}
			if ac.run.Agent == agenttest.Codex {
				replayRollout(t, res.Transcript)
			}
		})
	}
}

// replayRollout replays a Codex rollout as `ctxctl replay` does.
func replayRollout(t *testing.T, path string) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatalf("rollout: %v", err)
	}
	defer fh.Close()
	tr, err := transcript.ImportCodex(fh, transcript.Options{})
	if err != nil {
		t.Fatalf("import %s: %v", path, err)
	}
	rep, err := replay.Run(context.Background(), tr, replay.Options{Config: config.Defaults(), ContextLimit: 200000, DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if rep.Responses < 3 || rep.ToolCalls < 3 || rep.OrphanToolResults != 0 || rep.UnansweredToolCalls != 0 {
		t.Fatalf("replay report %+v", rep)
	}
	t.Logf("rollout replayed: %d responses, %d tool calls, %d messages", rep.Responses, rep.ToolCalls, rep.Messages)
}

func countCompactions(t *testing.T, f *fixture, id string) int {
	n := 0
	_ = f.eng.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindCompactionStarted {
			n++
		}
		return nil
	})
	return n
}

func tail(s string) string { return s[max(0, len(s)-4000):] }

// TestCodexResumedAfterCompaction: `codex exec "TASK-1 …"` through ctxd
// overflows the fake's small window and ctxd compacts; `codex exec resume
// --last "TASK-2 …"` then resumes the session. Every task request of the
// resumed turn carries TASK-1, the first task a person gave (not Codex's
// <environment_context> item), and TASK-2, the newest prompt
// (docs/design.md §5.2), with no upstream refusal.
func TestCodexResumedAfterCompaction(t *testing.T) {
	agenttest.Bin(t, agenttest.Codex)
	const marker = "CTXD-DONE-CODEX"
	window := 9800 + 3000
	p := fakeprovider.Start(t, fakeprovider.Config{WindowTokens: window, Rounds: 2, OutputBytes: 25000, Marker: marker})
	cfg := testConfig()
	cfg.ContextCompaction.KeepRecentTokens = 1000
	cfg.ContextCompaction.Trigger = config.Trigger{BufferTokens: 1500}
	cfg.Proxy.Upstreams.OpenAI.BaseURL = p.URL()
	cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: uint64(window), TokenFactor: 1}
	f := newFixture(t, cfg)
	first := agenttest.Run{Agent: agenttest.Codex, BaseURL: f.url, Prompt: "TASK-1: run the scripted task.", Timeout: 180e9}.Exec(t)
	if first.ExitCode != 0 || !strings.Contains(first.FinalText(), marker) {
		agenttest.Log(t, first, p)
		t.Fatalf("turn 1: exit %d, answer %q; proxy logs:\n%s", first.ExitCode, first.FinalText(), tail(f.logs.String()))
	}
	ids, _ := f.eng.ListSessions(context.Background())
	comps := 0
	for _, id := range ids {
		comps += countCompactions(t, f, id)
	}
	if comps == 0 {
		t.Fatal("the first turn did not compact")
	}
	n := len(p.Requests())
	second := agenttest.Run{Agent: agenttest.Codex, BaseURL: f.url, Prompt: "TASK-2: run the scripted task once more.",
		Home: first.Home, WorkDir: first.WorkDir, Continue: true, Timeout: 180e9}.Exec(t)
	agenttest.Log(t, second, p)
	if second.ExitCode != 0 || !strings.Contains(second.FinalText(), marker) {
		t.Fatalf("turn 2: exit %d, answer %q; proxy logs:\n%s", second.ExitCode, second.FinalText(), tail(f.logs.String()))
	}
	task := 0
	for _, r := range p.Requests()[n:] {
		if r.Path != "/v1/responses" || r.Step == fakeprovider.StepSummary || !strings.Contains(string(r.Body), "exec_command") {
			continue
		}
		task++
		for _, want := range []string{"TASK-1", "TASK-2"} {
			if !strings.Contains(string(r.Body), want) {
				t.Errorf("request %d of the resumed turn lacks %s", r.Seq, want)
			}
		}
	}
	if task == 0 {
		t.Fatal("no task request in the resumed turn")
	}
	if r := p.Refused(); len(r) != 0 {
		t.Fatalf("%d upstream refusals, first: %s", len(r), r[0].Error)
	}
}

// TestCodexWebSocketFallsBackAtOnce: Codex with a provider that supports
// WebSockets (as OpenAI's own does) opens one on GET /v1/responses through
// ctxd; ctxd declines it with 426, Codex falls back to HTTP in the same
// turn and finishes the task managed, as with the HTTP transport alone.
func TestCodexWebSocketFallsBackAtOnce(t *testing.T) {
	agenttest.Bin(t, agenttest.Codex)
	const marker = "CTXD-DONE-CODEX-WS"
	firstRequest := func(ws bool) (time.Duration, *fixture) {
		p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 1, OutputBytes: 2000, Marker: marker})
		cfg := testConfig()
		cfg.Proxy.Upstreams.OpenAI.BaseURL = p.URL()
		cfg.Models["gpt-5.2-codex"] = config.Model{ContextLimit: 400000, TokenFactor: 1}
		f := newFixture(t, cfg)
		start := time.Now()
		res := agenttest.Run{Agent: agenttest.Codex, BaseURL: f.url, Prompt: "Run the scripted task.", Timeout: 180e9, WebSockets: ws}.Exec(t)
		if res.ExitCode != 0 || !strings.Contains(res.FinalText(), marker) {
			agenttest.Log(t, res, p)
			t.Fatalf("websockets %v: exit %d, answer %q; proxy logs:\n%s", ws, res.ExitCode, res.FinalText(), tail(f.logs.String()))
		}
		reqs := p.Requests()
		if len(reqs) == 0 {
			t.Fatal("no request reached the upstream")
		}
		for _, r := range reqs {
			if r.Method != "POST" {
				t.Errorf("websockets %v: a %s %s reached the upstream", ws, r.Method, r.Path)
			}
		}
		if s := f.p.Stats(); s.Managed == 0 || s.PassedThrough != 0 {
			t.Errorf("websockets %v: stats %+v: want every request managed", ws, s)
		}
		return reqs[0].Time.Sub(start), f
	}
	direct, _ := firstRequest(false)
	viaWS, f := firstRequest(true)
	t.Logf("first model request after %s over HTTP, %s when Codex tries a WebSocket first (%d upgrades declined)", direct, viaWS, f.p.Stats().DeclinedUpgrades)
	if n := f.p.Stats().DeclinedUpgrades; n == 0 {
		t.Error("Codex opened no WebSocket: supports_websockets was not taken")
	}
	// The timing is TestCodexStartsAsFastAsDirect's (best of three runs
	// against an upstream that serves the WebSocket): one run of each
	// here is too few under load.
}
