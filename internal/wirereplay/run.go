package wirereplay

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/ledger"
	"github.com/ctxd/ctxd/proxy"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/workers"
)

// Result is one replay of a session.
type Result struct {
	// Turns is the number of agent requests sent; Managed how many came
	// back with a ctxd session (HeaderSessionID), always Turns directly.
	Turns, Managed int
	// Usage is what the upstream billed, summaries included.
	Usage Usage
	// Stats are the proxy's counters (zero directly).
	Stats proxy.Stats
	// MissingPrompt lists the turns whose forwarded request lacks the
	// newest person's prompt (Turn.Prompt), MissingFirst those that lack
	// the first task (Turn.FirstTask).
	MissingPrompt, MissingFirst []int
	// Failed lists the turns the client got no 200 for, with the status.
	Failed []string
	// Sessions are ctxd's sessions of the run, with their figures (nil
	// directly).
	Sessions []engine.Info
	// Ledgers are the savings ledgers of those sessions (nil directly).
	Ledgers [][]ledger.Entry
	// Bodies are the agent requests the upstream received, in order
	// (summarizer requests left out).
	Bodies [][]byte
}

// apiKey is the replay client's credential (only the fake sees it).
const apiKey = "sk-ant-replay-0123456789abcdef"

// Direct sends s's requests straight to a fresh Upstream: the agent with no
// proxy.
func Direct(tb testing.TB, s *Session) Result {
	tb.Helper()
	up := StartUpstream(tb)
	res := Result{}
	for i, t := range s.Turns {
		up.NextTurn(t)
		status, _ := post(tb, up.URL(), s, t.Body)
		res.Turns++
		if status != http.StatusOK {
			res.Failed = append(res.Failed, strconv.Itoa(i)+": "+strconv.Itoa(status))
		}
		res.Managed++
	}
	res.Usage = up.Usage()
	res.Bodies = up.Bodies()
	res.MissingPrompt = missing(s, res.Bodies, func(t Turn) string { return t.Prompt })
	res.MissingFirst = missing(s, res.Bodies, func(t Turn) string { return t.FirstTask })
	if errs := up.Errors(); len(errs) > 0 {
		tb.Fatalf("replay upstream: %v", errs)
	}
	return res
}

// Through sends s's requests to ctxd's proxy, with cfg (its upstream set
// to a fresh Upstream), over an in-memory store: the agent with ctxd.
// Compactions still running after the last request are waited for and
// billed.
func Through(tb testing.TB, s *Session, cfg config.Config) Result {
	tb.Helper()
	up := StartUpstream(tb)
	cfg.Proxy.Upstreams.Anthropic.BaseURL = up.URL()
	cfg.Proxy.Upstreams.OpenAI.BaseURL = up.URL()
	// A summarizer binding with no base URL of its own summarizes on the
	// same fake upstream (never a real provider's endpoint).
	cfg.Summarizer.Bindings = slices.Clone(cfg.Summarizer.Bindings)
	for i := range cfg.Summarizer.Bindings {
		if cfg.Summarizer.Bindings[i].BaseURL == "" {
			cfg.Summarizer.Bindings[i].BaseURL = up.URL()
		}
	}
	if s.Limit > 0 {
		cfg.Models = maps.Clone(cfg.Models)
		if s.Agent == "codex" {
			cfg.Models[s.Model] = config.Model{ContextLimit: s.Limit}
		} else {
			cfg.Models[s.Model] = config.Model{ContextLimit: s.Limit, ThinkingBinding: true, TokenFactor: 1.35}
		}
	}
	if cfg.Storage.DataDir == "" {
		cfg.Storage.DataDir = tb.TempDir()
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := store.OpenInMemory()
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	secret := bytes.Repeat([]byte("r"), artifacts.SecretSize)
	arts, err := artifacts.Open(db, secret)
	if err != nil {
		tb.Fatal(err)
	}
	defer arts.Close()
	cps := checkpoint.Open(db, checkpoint.Options{})
	defer cps.Close()
	pool, err := workers.New(workers.Options{Size: int(cfg.Workers.Size), Queue: int(cfg.Workers.Queue), DrainTimeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = pool.Run(ctx); close(done) }()
	eng, err := engine.New(engine.Options{Config: cfg, Log: cps, Artifacts: arts, Pool: pool, Logger: logger,
		Summarizer: summarizer.New(summarizer.Options{Logger: logger, RetryMax: -1}), OffloadDir: cfg.Storage.DataDir})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Engine: eng, Secret: secret, Config: cfg.Proxy, Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	hs := &http.Server{Handler: p.Handler(), ConnContext: p.ConnContext, ErrorLog: slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn)}
	go func() { _ = hs.Serve(l) }()
	url := "http://" + l.Addr().String()

	res := Result{}
	ids := map[string]bool{}
	for i, t := range s.Turns {
		up.NextTurn(t)
		status, h := post(tb, url, s, t.Body)
		res.Turns++
		if status != http.StatusOK {
			res.Failed = append(res.Failed, strconv.Itoa(i)+": "+strconv.Itoa(status))
		}
		if id := h.Get(proxy.HeaderSessionID); id != "" {
			res.Managed++
			ids[id] = true
		}
	}
	// Shutdown waits for the handlers, WaitRecords for the answers'
	// records, which trail their responses: the last answer's (and its
	// ledger entry) is written after the client has read its last byte.
	_ = hs.Shutdown(context.Background())
	_ = p.WaitRecords(context.Background())
	cancel()
	<-done
	res.Usage = up.Usage()
	res.Stats = p.Stats()
	res.Bodies = up.Bodies()
	res.MissingPrompt = missing(s, res.Bodies, func(t Turn) string { return t.Prompt })
	res.MissingFirst = missing(s, res.Bodies, func(t Turn) string { return t.FirstTask })
	if dumpBodies != nil {
		dumpBodies(res.Bodies)
	}
	for id := range ids {
		if info, err := eng.Session(context.Background(), id); err == nil {
			res.Sessions = append(res.Sessions, info)
		}
		if entries, _, err := eng.Ledger(context.Background(), id); err == nil {
			res.Ledgers = append(res.Ledgers, entries)
		}
	}
	if errs := up.Errors(); len(errs) > 0 {
		tb.Fatalf("replay upstream: %v", errs)
	}
	return res
}

// post sends one request of s as its agent does and reads the whole
// answer: Codex to the Responses API with a bearer credential, the others
// to the Messages API.
func post(tb testing.TB, base string, s *Session, body []byte) (int, http.Header) {
	path := "/v1/messages?beta=true"
	if s.Agent == "codex" {
		path = "/v1/responses"
	}
	req, err := http.NewRequest("POST", base+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if s.Agent == "codex" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	} else {
		req.Header.Set("X-Api-Key", apiKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// missing lists the turns whose forwarded body lacks the turn's piece
// (piece: its prompt or first task); bodies are the agent requests the
// upstream received, one per turn.
func missing(s *Session, bodies [][]byte, piece func(Turn) string) []int {
	var out []int
	for i, t := range s.Turns {
		p := piece(t)
		if p == "" {
			continue
		}
		if i >= len(bodies) || !bytes.Contains(bodies[i], []byte(p)) {
			out = append(out, i)
		}
	}
	return out
}

// dumpBodies, when set (a debugging test), gets the bodies ctxd forwarded.
var dumpBodies func([][]byte)
