package agenttest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/fakeprovider"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/proxy"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
)

// startCtxd runs ctxd's engine and provider proxy in process in front of
// upstream, on a loopback port, and returns the proxy's URL. limit, when
// > 0, is the context window ctxd is configured with for the agents'
// models (the operator's [models."<id>"] context_limit): the fake's small
// window.
func startCtxd(t *testing.T, upstream string, limit uint64) (string, *engine.Engine) {
	c := newCtxd(t, upstream, limit)
	return c.url, c.eng
}

// ctxd is an in-process daemon: a store that outlives restarts, and the
// engine and proxy that a restart replaces.
type ctxd struct {
	t    *testing.T
	cfg  config.Config
	db   interface{ Close() error }
	arts *artifacts.Store
	cps  *checkpoint.Store
	pool *workers.Pool
	eng  *engine.Engine
	p    *proxy.Proxy
	hs   *http.Server
	url  string
}

func newCtxd(t *testing.T, upstream string, limit uint64) *ctxd {
	t.Helper()
	return newCtxdWith(t, upstream, limit, nil)
}

// newCtxdWith is newCtxd with edit, when not nil, applied to the
// configuration last.
func newCtxdWith(t *testing.T, upstream string, limit uint64, edit func(*config.Config)) *ctxd {
	t.Helper()
	db, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	c := &ctxd{t: t, db: db}
	if c.arts, err = artifacts.Open(db, []byte(strings.Repeat("s", artifacts.SecretSize))); err != nil {
		t.Fatal(err)
	}
	c.cps = checkpoint.Open(db, checkpoint.Options{})
	if c.pool, err = workers.New(workers.Options{Size: 2, Queue: 8, DrainTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.pool.Run(ctx); close(done) }()
	cfg := config.Defaults()
	cfg.Storage.DataDir = t.TempDir()
	for _, id := range []string{"claude-opus-4-8", "claude-local-1"} {
		m, ok := cfg.Models[id]
		if !ok {
			m = config.Model{ContextLimit: 200000, ThinkingBinding: true, TokenFactor: 1.35}
		}
		if limit > 0 {
			m.ContextLimit = limit
			configuredWindow(&cfg, id)
		}
		cfg.Models[id] = m
	}
	if limit > 20000 {
		// The small windows leave room for the agent's fixed prefix (Claude
		// Code's system prompt and tools are ~19,000 tokens of 24,000):
		// at the default 70 % that prefix alone reaches the threshold and
		// automatic compaction is futile (docs/design.md §5.2).
		cfg.ContextCompaction.Trigger = config.Trigger{Percent: 85}
	}
	// The tests compact the agents' short sessions at the threshold, as
	// they did before compactions were weighed (docs/design.md §5.1): a
	// session of a dozen requests would wait for the hard mark.
	cfg.ContextCompaction.WeighCompactions = false
	cfg.Proxy.Upstreams.Anthropic.BaseURL = upstream
	if edit != nil {
		edit(&cfg)
	}
	c.cfg = cfg
	c.start()
	t.Cleanup(func() {
		_ = c.hs.Close()
		_ = c.p.WaitRecords(context.Background())
		cancel()
		<-done
		_ = c.cps.Close()
		_ = c.arts.Close()
		_ = c.db.Close()
	})
	return c
}

// start builds an engine and a proxy over the store, on a new port.
func (c *ctxd) start() {
	t := c.t
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	c.eng, err = engine.New(engine.Options{Config: c.cfg, Log: c.cps, Artifacts: c.arts, Pool: c.pool, Logger: logger,
		Summarizer: summarizer.New(summarizer.Options{Logger: logger, RetryMax: -1}), OffloadDir: c.cfg.Storage.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Engine: c.eng, Secret: []byte(strings.Repeat("k", 32)), Config: c.cfg.Proxy, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	c.p = p
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.hs = &http.Server{Handler: p.Handler(), ConnContext: p.ConnContext}
	go func() { _ = c.hs.Serve(l) }()
	c.url = "http://" + l.Addr().String()
}

// restart drops the engine and the proxy, all their memory, and starts new
// ones over the same store: a daemon restart.
func (c *ctxd) restart() {
	_ = c.hs.Shutdown(context.Background())
	_ = c.p.WaitRecords(context.Background()) // the answers' records trail their responses
	c.start()
}

// proxyAgents are the agents on the Anthropic Messages API, with the fake
// window of the overflow scenario for each (their first requests differ in
// size: Claude Code's system prompt and tools are ~19,000 of the fake's
// tokens, pi's ~1,400).
var proxyAgents = []struct {
	agentCase
	window int
}{
	{agentCase{"claude", Run{Agent: ClaudeCode}}, 24000},
	{agentCase{"pi", Run{Agent: Pi}}, 6500},
}

// TestAgentThroughCtxd runs each agent, unchanged, with its base URL on
// ctxd's proxy in front of the strict fake provider:
//
//   - the scripted task: it finishes, the fake refuses nothing, and every
//     request extends the one before (the prompt cache stays valid);
//   - the overflow task (a 25 KB tool output in a small window that ctxd is
//     configured with): without ctxd the agent gets the 400
//     (TestAgentOverflowWithoutCtxd); through ctxd it finishes with its
//     final answer, 0 upstream refusals, the large output offloaded (the
//     stub reaches the model), ≥ 1 compaction recorded, and the session is
//     there for the daemon API.
func TestAgentThroughCtxd(t *testing.T) {
	for _, ac := range proxyAgents {
		t.Run(ac.name+"/task", func(t *testing.T) {
			marker := "CTXD-DONE-" + strings.ToUpper(ac.name)
			p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 2, OutputBytes: 4000, Marker: marker})
			url, eng := startCtxd(t, p.URL(), 0)
			run := ac.run
			run.BaseURL, run.Prompt = url, "Run the scripted task."
			res := run.Exec(t)
			Log(t, res, p)
			if res.ExitCode != 0 || res.TimedOut || !strings.Contains(res.FinalText(), marker) {
				t.Fatalf("exit %d, timed out %v, answer %q", res.ExitCode, res.TimedOut, res.FinalText())
			}
			if n := len(p.Refused()); n != 0 {
				t.Fatalf("%d refused requests, first: %s", n, p.Refused()[0].Error)
			}
			if err := fakeprovider.CheckChain(p.Messages(true)); err != nil {
				t.Errorf("requests through ctxd do not extend each other: %v", err)
			}
			if ids, _ := eng.ListSessions(context.Background()); len(ids) == 0 {
				t.Error("no session recorded")
			}
		})
		t.Run(ac.name+"/overflow", func(t *testing.T) {
			marker := "CTXD-DONE-" + strings.ToUpper(ac.name)
			p := fakeprovider.Start(t, fakeprovider.Config{WindowTokens: ac.window, Rounds: 2, OutputBytes: 25000, Marker: marker})
			url, eng := startCtxd(t, p.URL(), uint64(ac.window))
			run := ac.run
			run.BaseURL, run.Prompt = url, "Run the scripted task."
			res := run.Exec(t)
			Log(t, res, p)
			if res.ExitCode != 0 || res.TimedOut || !strings.Contains(res.FinalText(), marker) {
				t.Fatalf("exit %d, timed out %v, answer %q", res.ExitCode, res.TimedOut, res.FinalText())
			}
			if n := len(p.Refused()); n != 0 {
				t.Fatalf("%d upstream refusals, first: %s", n, p.Refused()[0].Error)
			}
			offloaded := false
			for _, r := range p.Requests() {
				if strings.Contains(string(r.Body), "artifact://") {
					offloaded = true
				}
			}
			if !offloaded {
				t.Error("no request carried an offload stub")
			}
			ctx := context.Background()
			ids, _ := eng.ListSessions(ctx)
			checkpoints := uint64(0)
			for _, id := range ids {
				info, err := eng.Session(ctx, id)
				if err == nil {
					checkpoints += info.Checkpoints
				}
			}
			if len(ids) == 0 || checkpoints == 0 {
				t.Errorf("sessions %v, %d checkpoints", ids, checkpoints)
			}
		})
	}
}

// TestAgentContinuesAcrossCtxdRestart: ctxd is restarted between two turns
// (`--continue`), after the first turn's overflow made ctxd compact; the
// second turn's first upstream request carries the same compacted context
// as the first turn's last (it extends it, markers normalized) — or, when
// the compaction ended after the first turn's last request, carries that
// compaction, or a later one the turn's last answer set off — and the second turn finishes with 0 refusals. (Claude Code's --continue resends
// its first prompt as a string where the first turn sent a text block:
// ctxd matches the two alike, or the second turn would start a new branch
// from the client's whole, uncompacted history and meet the window.)
func TestAgentContinuesAcrossCtxdRestart(t *testing.T) {
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
			n := len(p.Messages(true))
			// The compaction the turn set off may end after its last request
			// (the fake answers at once, and a request's checks run when the
			// upstream accepts it: docs/design.md §10): let it end first.
			_ = c.p.WaitRecords(context.Background())
			ids, _ := c.eng.ListSessions(context.Background())
			for _, id := range ids {
				if err := c.eng.WaitCompaction(context.Background(), id); err != nil {
					t.Fatalf("turn 1's compaction of %s: %v", id, err)
				}
			}
			c.restart()
			second := Run{Agent: ac.run.Agent, BaseURL: c.url, Prompt: "Run it once more.", Home: first.Home, WorkDir: first.WorkDir, Continue: true}.Exec(t)
			Log(t, second, p)
			if second.ExitCode != 0 || !strings.Contains(second.FinalText(), marker) {
				t.Fatalf("turn 2: exit %d, answer %q", second.ExitCode, second.FinalText())
			}
			main := p.Messages(true)
			if len(main) <= n {
				t.Fatal("no task request in the second turn")
			}
			last, next := summaryOf.FindSubmatch(main[n-1].Body), summaryOf.FindSubmatch(main[n].Body)
			switch {
			case last != nil && next != nil && !bytes.Equal(last[1], next[1]):
				// A later compaction (the post-check of the turn's last
				// answer) ended after the turn's last request: the
				// restarted ctxd serves that one.
			case last != nil:
				if err := fakeprovider.Extends(main[n-1].Body, main[n].Body); err != nil {
					t.Errorf("after the restart the first request does not carry the same compacted context: %v", err)
				}
			case !strings.Contains(string(main[n].Body), "summary of the"):
				// The compaction ended after the turn's last request: the
				// restarted ctxd must serve it, not the client's history.
				t.Errorf("neither the first turn's last request nor the second turn's first carries a ctxd summary")
			}
			if len(p.Refused()) != 0 {
				t.Fatalf("refused: %s", p.Refused()[0].Error)
			}
		})
	}
}

// summaryOf finds the count of messages a ctxd summary in a request body
// replaced: it tells one compaction's summary from a later one's.
var summaryOf = regexp.MustCompile(`summary of the (\d+) earlier messages`)

// TestClaudeCodeNewestPromptSurvivesCompaction: `claude -p "TASK-1 …"`,
// then `claude -p --continue "TASK-2 …"` through ctxd, whose small window
// makes the second turn compact. Every task request of the second turn —
// before and after its compaction — carries TASK-2, the newest prompt a
// person wrote, and TASK-1, the first task (docs/design.md §5.2): Claude
// Code's role "system" messages and reminders are not taken for either.
func TestClaudeCodeNewestPromptSurvivesCompaction(t *testing.T) {
	const window = 24000
	marker := "CTXD-DONE-CLAUDE"
	p := fakeprovider.Start(t, fakeprovider.Config{WindowTokens: window, Rounds: 2, OutputBytes: 25000, Marker: marker})
	c := newCtxd(t, p.URL(), window)
	first := Run{Agent: ClaudeCode, BaseURL: c.url, Prompt: "TASK-1: run the scripted task."}.Exec(t)
	if first.ExitCode != 0 || !strings.Contains(first.FinalText(), marker) {
		Log(t, first, p)
		t.Fatalf("turn 1: exit %d, answer %q", first.ExitCode, first.FinalText())
	}
	checkpoints := func() uint64 {
		ids, _ := c.eng.ListSessions(context.Background())
		var n uint64
		for _, id := range ids {
			if info, err := c.eng.Session(context.Background(), id); err == nil {
				n += info.Checkpoints
			}
		}
		return n
	}
	n, before := len(p.Messages(true)), checkpoints()
	second := Run{Agent: ClaudeCode, BaseURL: c.url, Prompt: "TASK-2: run the scripted task once more.", Home: first.Home, WorkDir: first.WorkDir, Continue: true}.Exec(t)
	Log(t, second, p)
	if second.ExitCode != 0 || !strings.Contains(second.FinalText(), marker) {
		t.Fatalf("turn 2: exit %d, answer %q", second.ExitCode, second.FinalText())
	}
	if after := checkpoints(); after <= before {
		t.Fatalf("no compaction in the second turn (%d checkpoints before, %d after)", before, after)
	}
	task := 0
	for _, r := range p.Messages(true)[n:] {
		if r.Step == fakeprovider.StepSummary {
			continue
		}
		task++
		for _, want := range []string{"TASK-2", "TASK-1"} {
			if !strings.Contains(string(r.Body), want) {
				t.Errorf("request %d of the second turn lacks %s", r.Seq, want)
			}
		}
	}
	if task == 0 {
		t.Fatal("no task request in the second turn")
	}
	if len(p.Refused()) != 0 {
		t.Fatalf("refused: %s", p.Refused()[0].Error)
	}
}
