package agenttest

import (
	"context"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// configuredWindow marks model id's context_limit as an operator's (a
// config file's), as config.Load does for an authored key.
func configuredWindow(cfg *config.Config, id string) {
	src, _ := cfg.ModelSourcesOf(id)
	src.ContextLimit = "test.toml"
	if cfg.ModelSources == nil {
		cfg.ModelSources = map[string]config.ModelFieldSources{}
	}
	cfg.ModelSources[id] = src
}

// mainSession is the session of the agent's task requests (the one with
// the most messages; side requests have their own).
func mainSession(t *testing.T, eng *engine.Engine) engine.Info {
	t.Helper()
	ctx := context.Background()
	ids, err := eng.ListSessions(ctx)
	if err != nil || len(ids) == 0 {
		t.Fatalf("sessions %v, %v", ids, err)
	}
	var best engine.Info
	for _, id := range ids {
		in, err := eng.Session(ctx, id)
		if err == nil && in.Messages > best.Messages {
			best = in
		}
	}
	return best
}

// TestClaudeCodeDefaultModelWindow: Claude Code with no --model sends its
// default model with the context-1m beta; through ctxd the task finishes
// and the session has the 1M window the beta asks for (source wire), not
// the catalog's 200k.
func TestClaudeCodeDefaultModelWindow(t *testing.T) {
	marker := "CTXD-DONE-CLAUDE-1M"
	p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 2, OutputBytes: 4000, Marker: marker})
	c := newCtxd(t, p.URL(), 0)
	res := Run{Agent: ClaudeCode, Model: "default", BaseURL: c.url, Prompt: "Run the scripted task."}.Exec(t)
	Log(t, res, p)
	if res.ExitCode != 0 || !strings.Contains(res.FinalText(), marker) {
		t.Fatalf("exit %d, answer %q", res.ExitCode, res.FinalText())
	}
	if n := len(p.Refused()); n != 0 {
		t.Fatalf("%d refused, first: %s", n, p.Refused()[0].Error)
	}
	beta := false
	for _, r := range p.Messages(true) {
		if strings.Contains(r.Header.Get("Anthropic-Beta"), "context-1m-") {
			beta = true
		}
	}
	if !beta {
		t.Fatal("Claude Code's default model was sent without the context-1m beta: the scenario does not hold")
	}
	in := mainSession(t, c.eng)
	if in.ContextLimit != engine.ContextLimit1M || in.WindowSource != engine.WindowWire {
		t.Errorf("session %s (%s): window %d (%s), want 1000000 (wire)", in.ID, in.Model, in.ContextLimit, in.WindowSource)
	}
}

// TestClaudeCodeOverflowAtTheSecondRequest: the provider's window is far
// smaller than the one ctxd was given (the 1M beta's, against a fake
// whose window is Claude Code's first request plus 6,000 tokens): the
// second task request, carrying a 25 KB tool output, overflows. ctxd reads
// the window and the count from the provider's refusal, compacts — the
// summarizer asked with the history alone, since the session's own prefix
// with it is what the provider just refused — and retries a request under
// that window, which the provider accepts; the agent finishes, having
// seen no refusal, and the session's window is the provider's (learned).
func TestClaudeCodeOverflowAtTheSecondRequest(t *testing.T) {
	marker := "CTXD-DONE-CLAUDE-OVERFLOW"
	p := fakeprovider.Start(t, fakeprovider.Config{Headroom: 6000, Rounds: 2, OutputBytes: 25000, Marker: marker})
	c := newCtxdWith(t, p.URL(), 0, func(cfg *config.Config) {
		// The tool output goes whole, so the second request overflows.
		cfg.Offload.Enabled = false
	})
	res := Run{Agent: ClaudeCode, Model: "default", BaseURL: c.url, Prompt: "Run the scripted task."}.Exec(t)
	Log(t, res, p)
	if res.ExitCode != 0 || !strings.Contains(res.FinalText(), marker) {
		t.Fatalf("exit %d, answer %q", res.ExitCode, res.FinalText())
	}
	reqs := p.Requests()
	if len(reqs) < 2 || !reqs[1].Refused() {
		t.Fatal("the second request did not overflow: the scenario does not hold")
	}
	// Every refusal is followed by ctxd's retry, which the provider
	// accepts: never a retry refused again.
	for i, r := range reqs {
		if r.Refused() && (i+1 == len(reqs) || reqs[i+1].Refused()) {
			t.Errorf("request %d refused (%s) and not recovered by the next", r.Seq, r.Error)
		}
	}
	in := mainSession(t, c.eng)
	if in.WindowSource != engine.WindowLearned || in.ContextLimit != uint64(p.Window()) {
		t.Errorf("session window %d (%s), want the provider's %d (learned)", in.ContextLimit, in.WindowSource, p.Window())
	}
	if in.Checkpoints == 0 {
		t.Error("no compaction recorded")
	}
}

// TestAgentContinuesAfterARestartWithAChangedConfig: the first turn runs
// under a configuration giving the agent's model a small window (the
// fake's); ctxd restarts with that entry gone. The session keeps the
// settings stored with it — its window, not the catalog's 200k, which
// would let the next request overflow — doctor's differences say what
// changed, and the second turn (--continue) finishes with no refusal.
func TestAgentContinuesAfterARestartWithAChangedConfig(t *testing.T) {
	for _, ac := range proxyAgents {
		t.Run(ac.name, func(t *testing.T) {
			marker := "CTXD-DONE-" + strings.ToUpper(ac.name)
			p := fakeprovider.Start(t, fakeprovider.Config{WindowTokens: ac.window, Rounds: 2, OutputBytes: 25000, Marker: marker})
			c := newCtxd(t, p.URL(), uint64(ac.window))
			first := Run{Agent: ac.run.Agent, BaseURL: c.url, Prompt: "Run the scripted task."}.Exec(t)
			if first.ExitCode != 0 || !strings.Contains(first.FinalText(), marker) {
				Log(t, first, p)
				t.Fatalf("turn 1: exit %d, answer %q", first.ExitCode, first.FinalText())
			}
			before := mainSession(t, c.eng)
			// The restart's configuration: the defaults, the test entries
			// gone (claude-local-1 is in no catalog; claude-opus-4-8 back
			// to the catalog's window).
			c.cfg = config.Defaults()
			c.cfg.Storage.DataDir = t.TempDir()
			c.cfg.Proxy.Upstreams.Anthropic.BaseURL = p.URL()
			c.restart()
			in, err := c.eng.Session(context.Background(), before.ID)
			if err != nil {
				t.Fatalf("after the restart the session is unreadable: %v", err)
			}
			if in.ContextLimit != uint64(ac.window) || len(in.SettingsDiff) == 0 {
				t.Errorf("after the restart: window %d (%s), differences %q; want the stored %d and a difference", in.ContextLimit, in.WindowSource, in.SettingsDiff, ac.window)
			}
			second := Run{Agent: ac.run.Agent, BaseURL: c.url, Prompt: "Run it once more.", Home: first.Home, WorkDir: first.WorkDir, Continue: true}.Exec(t)
			Log(t, second, p)
			if second.ExitCode != 0 || !strings.Contains(second.FinalText(), marker) {
				t.Fatalf("turn 2: exit %d, answer %q", second.ExitCode, second.FinalText())
			}
			if r := p.Refused(); len(r) != 0 {
				t.Fatalf("%d refused, first: %s", len(r), r[0].Error)
			}
		})
	}
}

// TestPiAtASmallWindowNeverRedoesItsWork: pi through ctxd at an 8,000-token
// window, with compactions weighed (the default) and 8 shell rounds of
// 8,000 bytes. A deferred compaction runs past the window, so the
// summarizer call is refused for its length and retried pruned; the
// pruned retry keeps the newest results, so the summary still says which
// rounds are done and pi runs each round once. When the retry pruned
// every result, the fake's summaries lost the rounds and pi redid them:
// 149 requests, 89 shell rounds, 31 checkpoints.
func TestPiAtASmallWindowNeverRedoesItsWork(t *testing.T) {
	const window = 8000
	marker := "CTXD-DONE-PI"
	p := fakeprovider.Start(t, fakeprovider.Config{WindowTokens: window, Rounds: 8, OutputBytes: 8000, Marker: marker})
	c := newCtxdWith(t, p.URL(), window, func(cfg *config.Config) { cfg.ContextCompaction.WeighCompactions = true })
	run := Run{Agent: Pi}
	run.BaseURL, run.Prompt = c.url, "Run the scripted task."
	res := run.Exec(t)
	Log(t, res, p)
	if res.ExitCode != 0 || res.TimedOut || !strings.Contains(res.FinalText(), marker) {
		t.Fatalf("exit %d, timed out %v, answer %q", res.ExitCode, res.TimedOut, res.FinalText())
	}
	steps := map[string]int{}
	for _, r := range p.Requests() {
		steps[r.Step]++
	}
	if steps[fakeprovider.StepShell] != 8 || steps[fakeprovider.StepFinal] != 1 {
		t.Fatalf("steps %v over %d requests: want each of the 8 shell rounds once", steps, len(p.Requests()))
	}
	t.Logf("%d requests, steps %v, %d refused (summarizer calls over the window, retried pruned)", len(p.Requests()), steps, len(p.Refused()))
}
