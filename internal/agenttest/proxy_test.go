package agenttest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	arts, err := artifacts.Open(db, []byte(strings.Repeat("s", artifacts.SecretSize)))
	if err != nil {
		t.Fatal(err)
	}
	cps := checkpoint.Open(db, checkpoint.Options{})
	pool, err := workers.New(workers.Options{Size: 2, Queue: 8, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = pool.Run(ctx); close(done) }()
	cfg := config.Defaults()
	cfg.Storage.DataDir = t.TempDir()
	for _, id := range []string{"claude-opus-4-8", "claude-local-1"} {
		m, ok := cfg.Models[id]
		if !ok {
			m = config.Model{ContextLimit: 200000, ThinkingBinding: true, TokenFactor: 1.35}
		}
		if limit > 0 {
			m.ContextLimit = limit
		}
		cfg.Models[id] = m
	}
	cfg.Proxy.Upstreams.Anthropic.BaseURL = upstream
	eng, err := engine.New(engine.Options{Config: cfg, Log: cps, Artifacts: arts, Pool: pool, Logger: logger,
		Summarizer: summarizer.New(summarizer.Options{Logger: logger, RetryMax: -1}), OffloadDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Engine: eng, Secret: []byte(strings.Repeat("k", 32)), Config: cfg.Proxy, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: p.Handler(), ConnContext: p.ConnContext}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() {
		_ = hs.Close()
		cancel()
		<-done
		_ = cps.Close()
		_ = arts.Close()
		_ = db.Close()
	})
	return "http://" + l.Addr().String(), eng
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
// ctxd's proxy in front of the strict fake provider (issue 15 point 7):
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
