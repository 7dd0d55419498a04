package main

// Integration tests of the real daemon process: the binary is
// built once in TestMain, started on a socket in a temporary directory with
// a configuration file written by the test, and driven only through
// api.Client (raw HTTP over the same socket where a request must be
// malformed on purpose).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/internal/syncbuf"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

var ctxdBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ctxd-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctxdBin = filepath.Join(dir, "ctxd")
	args := []string{"build", "-o", ctxdBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build ctxd:", err)
		return 1
	}
	return m.Run()
}

// env is one daemon's files: the socket, the data directory and the
// configuration file, kept across restarts.
type env struct {
	dir, socket, dataDir, configPath, xdgConfig string
	// extraEnv is added to the daemon's environment ("K=V").
	extraEnv []string
	// cwd is the daemon's working directory; "" is the test's.
	cwd string
}

// maxSocketPath leaves room under the 104/108-byte sun_path limit.
const maxSocketPath = 100

func newEnv(t *testing.T, configTOML string) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{
		dir:        dir,
		socket:     filepath.Join(dir, "run", "ctxd.sock"),
		dataDir:    filepath.Join(dir, "data"),
		configPath: filepath.Join(dir, "ctxd.toml"),
		xdgConfig:  filepath.Join(dir, "xdg-config"),
	}
	if len(e.socket) > maxSocketPath {
		short, err := os.MkdirTemp("/tmp", "ctxd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(short) })
		e.socket = filepath.Join(short, "run", "ctxd.sock")
	}
	if err := os.MkdirAll(e.xdgConfig, 0o700); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, configTOML)
	return e
}

func (e *env) writeConfig(t *testing.T, s string) {
	t.Helper()
	if err := os.WriteFile(e.configPath, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e *env) client() *api.Client { return &api.Client{Socket: e.socket} }

// proc is one running daemon process.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{}
	err    error
}

// command builds the daemon's command line with an environment that has no
// user configuration layer and no inherited socket settings.
func (e *env) command(extra ...string) *exec.Cmd {
	args := append([]string{"--socket", e.socket, "--data-dir", e.dataDir, "--config", e.configPath, "--log-level", "debug"}, extra...)
	cmd := exec.Command(ctxdBin, args...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + e.dir,
		"XDG_CONFIG_HOME=" + e.xdgConfig,
	}
	cmd.Env = append(cmd.Env, e.extraEnv...)
	cmd.Dir = e.cwd
	return cmd
}

func (e *env) start(t *testing.T) *proc {
	t.Helper()
	return e.startWith(t)
}

// startWith starts the daemon with extra flags and waits until it answers.
func (e *env) startWith(t *testing.T, extra ...string) *proc {
	t.Helper()
	p := &proc{cmd: e.command(extra...), stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("ctxd stderr:\n%s", p.stderr.String())
		}
	})
	// Readiness: poll Status until the daemon answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := e.client().Status(ctx)
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("ctxd exited before it was ready: %v\n%s", p.err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ctxd not ready: %v\n%s", err, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// signalAndWait sends sig and returns the exit code.
func (p *proc) signalAndWait(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		t.Fatalf("ctxd did not exit after %v", sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// refusedOutput runs a daemon that must refuse to start and returns its
// output and exit error. One that is still running after 20 s started:
// it is killed and the test fails (rather than waiting forever).
func refusedOutput(t *testing.T, cmd *exec.Cmd) ([]byte, error) {
	t.Helper()
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return []byte(out.String()), err
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("ctxd started where it must refuse:\n%s", out.String())
		return nil, nil
	}
}

// waitLog waits until the daemon's stderr contains s.
func (p *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stderr.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("ctxd log never said %q:\n%s", s, p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func userText(s string) api.Message {
	return api.Message{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: s}}}
}

func assistantText(s string, usage *api.Usage) api.Message {
	return api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockText, Text: s}}, Usage: usage}
}

const baseConfig = `
[workers]
size = 2
queue = 16

[proxy]
listen = "127.0.0.1:0"
`

// TestAgentLoop runs an agent loop: a session with a small context window,
// appends with reported usage, auto-compaction in the background (seen on
// the event stream), and the context in all three formats.
func TestAgentLoop(t *testing.T) {
	e := newEnv(t, baseConfig)
	e.start(t)
	c := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	s, err := c.CreateSession(ctx, api.CreateSessionRequest{
		ID: "agent", Model: "local-model", ContextLimit: 4000, System: "You are terse.",
		Tools: []api.ToolDef{{Name: "bash", Description: "run a command", InputSchema: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}}}`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Threshold != 2800 {
		t.Fatalf("threshold %d, want 70%% of 4000", s.Threshold)
	}

	// Watch the events from the start, as an agent's UI would.
	events := make(chan api.Event, 256)
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	var ewg sync.WaitGroup
	ewg.Go(func() {
		_ = c.Events(ectx, "agent", 1, func(ev api.Event) error { events <- ev; return nil })
	})

	// The usage reported is what the provider would count for these
	// messages (each result about 600 tokens), so ctxd's figures after a
	// compaction, which start from that count, mean what they say.
	var used uint64 = 100
	queued := false
	for i := 0; i < 12 && !queued; i++ {
		call := api.Message{Role: api.RoleAssistant, Content: []api.Block{
			{Type: api.BlockText, Text: fmt.Sprintf("step %d: listing", i)},
			{Type: api.BlockToolCall, ID: fmt.Sprintf("call-%d", i), Name: "bash", Input: json.RawMessage(`{"cmd":"ls -la"}`)},
		}, Usage: &api.Usage{InputTokens: used, OutputTokens: 40}}
		result := api.Message{Role: api.RoleTool, ToolCallID: fmt.Sprintf("call-%d", i), ToolName: "bash",
			Content: []api.Block{{Type: api.BlockText, Text: strings.Repeat(fmt.Sprintf("file-%d.go\n", i), 120)}}}
		answer := assistantText(fmt.Sprintf("done with step %d", i), &api.Usage{InputTokens: used + 600, CacheReadInputTokens: 0, OutputTokens: 20})
		res, err := c.AppendMessages(ctx, "agent", api.AppendMessagesRequest{Messages: []api.Message{userText(fmt.Sprintf("do step %d", i)), call, result, answer}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) != 4 || res.Messages[0].Seq == 0 || res.LastSeq < res.Messages[3].Seq {
			t.Fatalf("append response: %+v", res)
		}
		queued = res.CompactionQueued
		used += 650
	}
	if !queued {
		t.Fatal("the post-check never queued a compaction")
	}

	// The compaction runs in the background: wait for its checkpoint event.
	var kinds []api.EventKind
	var cpSeq uint64
	for cpSeq == 0 {
		select {
		case ev := <-events:
			kinds = append(kinds, ev.Kind)
			if ev.Kind == api.EventCheckpoint {
				cpSeq = ev.Seq
			}
			if ev.Kind == api.EventCompactionFailed {
				t.Fatalf("compaction failed: %s", ev.Data)
			}
		case <-ctx.Done():
			t.Fatalf("no checkpoint event; saw %v", kinds)
		}
	}
	if !containsKind(kinds, api.EventCompactionStarted) {
		t.Errorf("no compaction_started before the checkpoint: %v", kinds)
	}
	ecancel()
	ewg.Wait()

	cps, err := c.Checkpoints(ctx, "agent")
	if err != nil || len(cps) == 0 || cps[len(cps)-1].Summary == "" {
		t.Fatalf("checkpoints: %+v %v", cps, err)
	}

	var canon api.ContextResponse
	raw, err := c.ContextRaw(ctx, "agent", api.FormatCanonical)
	if err != nil || json.Unmarshal(raw, &canon) != nil {
		t.Fatalf("canonical: %s %v", raw, err)
	}
	if canon.CheckpointSeq == 0 || canon.System != "You are terse." || len(canon.Tools) != 1 || len(canon.Messages) == 0 {
		t.Fatalf("canonical context: %s", raw)
	}
	// The session's first request is carried before the summary
	// (keep_first_request, docs/design.md §5.2).
	sum := canon.Messages[0]
	if sum.Seq == 1 && len(canon.Messages) > 1 {
		sum = canon.Messages[1]
	}
	if sum.Seq != 0 || !strings.Contains(sum.Content[0].Text, "summary") {
		t.Errorf("the context does not start with the summary (after the first request): %+v", canon.Messages[0])
	}

	raw, err = c.ContextRaw(ctx, "agent", api.FormatAnthropic)
	var anth struct {
		System string `json:"system"`
		Tools  []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err != nil || json.Unmarshal(raw, &anth) != nil {
		t.Fatalf("anthropic: %s %v", raw, err)
	}
	if anth.System == "" || len(anth.Tools) != 1 || anth.Tools[0].Name != "bash" || len(anth.Messages) == 0 || anth.Messages[0].Role != "user" {
		t.Fatalf("anthropic shape: %s", raw)
	}
	for i, m := range anth.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			t.Errorf("anthropic message %d has role %q", i, m.Role)
		}
		if i > 0 && m.Role == anth.Messages[i-1].Role && m.Role == "assistant" {
			t.Errorf("anthropic messages %d and %d are both assistant", i-1, i)
		}
	}

	raw, err = c.ContextRaw(ctx, "agent", api.FormatOpenAI)
	var oai struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err != nil || json.Unmarshal(raw, &oai) != nil {
		t.Fatalf("openai: %s %v", raw, err)
	}
	if len(oai.Messages) < 2 || oai.Messages[0].Role != "system" || len(oai.Tools) != 1 || oai.Tools[0].Function.Name != "bash" {
		t.Fatalf("openai shape: %s", raw)
	}

	m, err := c.Metrics(ctx)
	if err != nil || !bytes.Contains(m, []byte(`ctxd_compactions_total{outcome="ok"}`)) {
		t.Errorf("metrics after a compaction:\n%s\n%v", m, err)
	}
}

func containsKind(ks []api.EventKind, k api.EventKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// TestCrashRecovery appends from several clients, kills the daemon with
// SIGKILL in the middle, restarts it and checks that every acknowledged
// message is stored and that the context reads byte for byte as the last
// read before the kill. Repeated; each round starts from the previous
// round's crash.
func TestCrashRecovery(t *testing.T) {
	t.Run("badger", func(t *testing.T) { crashRecovery(t, baseConfig) })
	t.Run("nats", func(t *testing.T) {
		// The same crashes of a fleet node (docs/design.md §9): its state is
		// in an R3 cluster, which survives it.
		c, err := natstest.Start(t.TempDir(), 3)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Shutdown)
		crashRecovery(t, baseConfig+natsStorage(c, "crash"))
	})
}

// natsStorage is the [storage] tables of a fleet node on cluster c.
func natsStorage(c *natstest.Cluster, prefix string) string {
	return fmt.Sprintf("\n[storage]\nbackend = \"nats\"\n[storage.nats]\nservers = [\"%s\"]\nreplicas = 3\nprefix = %q\n",
		strings.Join(c.URLs(), `", "`), prefix)
}

func crashRecovery(t *testing.T, config string) {
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	e := newEnv(t, config)
	const writers = 4
	type writer struct {
		id      string
		acked   []string // message texts acknowledged, in order
		lastCtx []byte   // the last context read (presend off) after an ack
		lastSeq uint64   // the last_seq that read reflected
	}
	ws := make([]*writer, writers)
	for i := range ws {
		ws[i] = &writer{id: fmt.Sprintf("w%d", i)}
	}
	// quiet is written once and only read afterwards: its bytes must match
	// exactly across every crash.
	var quietCtx []byte
	rng := rand.New(rand.NewPCG(1, 2))
	compared := 0
	defer func() {
		t.Logf("%d rounds; %d writer contexts compared byte for byte (the others had an append in flight at the kill)", rounds, compared)
	}()

	for round := range rounds {
		p := e.start(t)
		c := e.client()
		ctx := context.Background()
		if round == 0 {
			for _, w := range ws {
				if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: w.id, Model: "claude-sonnet-4-5", System: "crash test"}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "quiet", Model: "gpt-4o", System: "q"}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.AppendMessages(ctx, "quiet", api.AppendMessagesRequest{Messages: []api.Message{userText("hello"), assistantText("hi <there> & you", nil)}}); err != nil {
				t.Fatal(err)
			}
			var err error
			if quietCtx, err = c.ContextWith(ctx, "quiet", api.ContextOptions{NoPreSend: true}); err != nil {
				t.Fatal(err)
			}
		} else {
			// After the crash: every acknowledged message is there, and
			// the context is the last one read before the kill.
			got, err := c.ContextWith(ctx, "quiet", api.ContextOptions{NoPreSend: true})
			if err != nil || !bytes.Equal(got, quietCtx) {
				t.Fatalf("round %d: quiet context changed across the crash:\nbefore %s\nafter  %s\n%v", round, quietCtx, got, err)
			}
			for _, w := range ws {
				texts := messageTexts(t, c, w.id)
				if !isSubsequence(w.acked, texts) {
					t.Fatalf("round %d: session %s lost acknowledged messages:\nacked  %q\nstored %q", round, w.id, w.acked, texts)
				}
				got, err := c.ContextWith(ctx, w.id, api.ContextOptions{NoPreSend: true})
				if err != nil {
					t.Fatal(err)
				}
				var cr api.ContextResponse
				if err := json.Unmarshal(got, &cr); err != nil {
					t.Fatal(err)
				}
				// An append in flight at the kill may have been stored
				// without its acknowledgement; then the log moved on and
				// the last read is not the final state.
				if cr.LastSeq == w.lastSeq {
					compared++
				}
				if cr.LastSeq == w.lastSeq && !bytes.Equal(got, w.lastCtx) {
					t.Fatalf("round %d: session %s context differs across the crash:\nbefore %s\nafter  %s", round, w.id, w.lastCtx, got)
				}
				w.acked = texts // unacknowledged but stored messages are now known
				w.lastCtx, w.lastSeq = got, cr.LastSeq
			}
		}

		// Concurrent writers; the kill comes once each has some acks.
		var wg sync.WaitGroup
		progress := make(chan struct{}, 1024)
		for _, w := range ws {
			wc := e.client()
			wg.Go(func() {
				for n := 0; ; n++ {
					txt := fmt.Sprintf("r%d-%s-%d", round, w.id, n)
					msgs := []api.Message{userText(txt)}
					if n%3 == 2 {
						msgs = append(msgs, assistantText("ok "+txt, &api.Usage{InputTokens: uint64(1000 + 40*n), OutputTokens: 12}))
					}
					if _, err := wc.AppendMessages(ctx, w.id, api.AppendMessagesRequest{Messages: msgs}); err != nil {
						return // the daemon died
					}
					for _, m := range msgs {
						w.acked = append(w.acked, m.Content[0].Text)
					}
					raw, err := wc.ContextWith(ctx, w.id, api.ContextOptions{NoPreSend: true})
					if err != nil {
						return
					}
					var cr api.ContextResponse
					if json.Unmarshal(raw, &cr) == nil {
						w.lastCtx, w.lastSeq = raw, cr.LastSeq
					}
					progress <- struct{}{}
				}
			})
		}
		for range writers * (5 + rng.IntN(30)) {
			<-progress
		}
		p.kill9(t)
		wg.Wait()
	}
}

// messageTexts returns the text of every message event of a session.
func messageTexts(t *testing.T, c *api.Client, id string) []string {
	t.Helper()
	var out []string
	err := c.StreamEvents(context.Background(), id, api.EventsOptions{}, func(ev api.Event) error {
		if ev.Kind == api.EventMessage && ev.Message != nil && len(ev.Message.Content) > 0 {
			out = append(out, ev.Message.Content[0].Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isSubsequence(want, have []string) bool {
	i := 0
	for _, h := range have {
		if i < len(want) && h == want[i] {
			i++
		}
	}
	return i == len(want)
}

// rawClient sends hand-made requests over the daemon's socket.
func rawClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	e := newEnv(t, baseConfig)
	e.start(t)
	c := e.client()
	ctx := context.Background()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "s", Model: "gpt-4o"}); err != nil {
		t.Fatal(err)
	}
	call := api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockToolCall, ID: "c1", Name: "bash", Input: json.RawMessage(`{}`)}}}
	if _, err := c.AppendMessages(ctx, "s", api.AppendMessagesRequest{Messages: []api.Message{userText("go"), call}}); err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		s, err := c.GetSession(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		return s.LastSeq
	}
	before := lastSeq()
	hc := rawClient(e.socket)
	big := `{"messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("x", api.MaxRequestBytes) + `"}]}]}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		{"malformed JSON", "POST", "/v1/sessions/s/messages", `{"messages": [`, 400, api.Invalid, ""},
		{"unknown field", "POST", "/v1/sessions/s/messages", `{"messages":[{"role":"user","content":[]}],"mesages":[]}`, 400, api.Invalid, "mesages"},
		{"oversized body", "POST", "/v1/sessions/s/messages", big, 413, api.TooLarge, ""},
		{"tool result for an unknown call", "POST", "/v1/sessions/s/messages", `{"messages":[{"role":"tool","tool_call_id":"c404","tool_name":"bash","content":[{"type":"text","text":"x"}]}]}`, 400, api.Invalid, "messages[0].tool_call_id"},
		{"unknown session", "POST", "/v1/sessions/nobody/messages", `{"messages":[{"role":"user","content":[]}]}`, 404, api.NotFound, ""},
		{"wrong method", "PUT", "/v1/sessions/s/messages", `{"messages":[]}`, 405, api.MethodNotAllowed, ""},
		{"compact an open round", "POST", "/v1/sessions/s/compact", `{"wait":true}`, 409, api.Conflict, ""},
		{"bad format", "GET", "/v1/sessions/s/context?format=yaml", "", 400, api.Invalid, "format"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://ctxd"+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", api.ContentTypeJSON)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var env api.ErrorEnvelope
			if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
				t.Fatalf("%d, body is not the error envelope: %s", resp.StatusCode, b)
			}
			if resp.StatusCode != tc.status || env.Error.Code != tc.code || env.Error.Field != tc.field {
				t.Fatalf("got %d %+v, want %d %s field %q", resp.StatusCode, env.Error, tc.status, tc.code, tc.field)
			}
			if tc.field != "" && !strings.Contains(env.Error.Message, tc.field) {
				t.Errorf("message %q does not name %q", env.Error.Message, tc.field)
			}
			if resp.Header.Get(api.HeaderVersion) == "" {
				t.Error("no version header")
			}
			if got := lastSeq(); got != before {
				t.Fatalf("last_seq %d → %d after a refused request", before, got)
			}
		})
	}
	_, err := c.Compact(ctx, "s", api.CompactRequest{})
	if api.ErrorMessage(err) != "Not compacting now: a tool call is still waiting on its result." {
		t.Errorf("compact of an open round: %v", err)
	}
}

func TestLocalSecurity(t *testing.T) {
	e := newEnv(t, baseConfig)
	p := e.start(t)

	fi, err := os.Lstat(e.socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket mode %v, want a 0600 socket", fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(e.socket))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v, want 0700", di.Mode().Perm())
	}

	// A request carrying Origin (a web page) is refused.
	req, _ := http.NewRequest("GET", "http://ctxd/v1/status", nil)
	req.Header.Set("Origin", "http://attacker.example")
	resp, err := rawClient(e.socket).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Origin: got %d, want 403", resp.StatusCode)
	}

	// A second daemon on the same socket refuses to start and leaves the
	// first one serving.
	cmd := exec.Command(ctxdBin, "--socket", e.socket, "--data-dir", filepath.Join(e.dir, "data2"), "--config", e.configPath)
	cmd.Env = []string{"HOME=" + e.dir, "XDG_CONFIG_HOME=" + e.xdgConfig}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("second ctxd: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "another ctxd is already serving on "+e.socket) {
		t.Errorf("second ctxd said:\n%s", out)
	}
	if _, err := e.client().Status(context.Background()); err != nil {
		t.Fatalf("the first daemon stopped answering: %v", err)
	}

	// SIGTERM: a clean exit, the socket file removed.
	if code := p.signalAndWait(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, p.stderr.String())
	}
	if _, err := os.Lstat(e.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after SIGTERM: %v", err)
	}
}

func TestReloadKeepsServing(t *testing.T) {
	e := newEnv(t, baseConfig)
	p := e.start(t)
	c := e.client()
	ctx := context.Background()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "r", Model: "gpt-4o"}); err != nil {
		t.Fatal(err)
	}

	e.writeConfig(t, baseConfig+"\n[offload]\nmax_chars = \"many\"\nnot_a_key = 1\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reload rejected")
	if !strings.Contains(p.stderr.String(), "not_a_key") {
		t.Errorf("the rejected reload does not name the bad key:\n%s", p.stderr.String())
	}
	if _, err := c.AppendMessages(ctx, "r", api.AppendMessagesRequest{Messages: []api.Message{userText("still here")}}); err != nil {
		t.Fatalf("after a rejected reload: %v", err)
	}

	e.writeConfig(t, baseConfig+"\n[context_compaction]\ntrigger = { percent = 50 }\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "configuration reloaded")
	s, err := c.GetSession(ctx, "r")
	if err != nil || s.Threshold != s.ContextLimit/2 {
		t.Fatalf("after a good reload: threshold %d of %d, %v", s.Threshold, s.ContextLimit, err)
	}
	if code := p.signalAndWait(t, syscall.SIGINT); code != 0 {
		t.Fatalf("exit code %d after SIGINT", code)
	}
}

// TestSocketActivation passes a listening unix socket as fd 3 with
// LISTEN_PID/LISTEN_FDS, as systemd does for contrib/ctxd.socket: ctxd
// serves on it and leaves the file in place when it stops (systemd owns it).
func TestSocketActivation(t *testing.T) {
	e := newEnv(t, baseConfig)
	if err := os.MkdirAll(filepath.Dir(e.socket), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", e.socket)
	if err != nil {
		t.Fatal(err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	f, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer l.Close()

	// sh's $$ is the pid ctxd keeps after exec.
	args := strings.Join([]string{ctxdBin, "--data-dir", e.dataDir, "--config", e.configPath, "--socket", filepath.Join(e.dir, "unused.sock")}, " ")
	cmd := exec.Command("/bin/sh", "-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec "+args)
	cmd.Env = []string{"HOME=" + e.dir, "XDG_CONFIG_HOME=" + e.xdgConfig}
	cmd.ExtraFiles = []*os.File{f}
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	var st *api.Status
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err = e.client().Status(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving on the passed socket: %v\n%s", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Version != api.Version {
		t.Errorf("status %+v", st)
	}
	// The child's stderr reaches the buffer through a pipe copied by
	// another goroutine: wait for the line rather than read once.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "socket_activated=true"); {
		if time.Now().After(deadline) {
			t.Errorf("log does not say socket_activated=true:\n%s", stderr.String())
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Lstat(filepath.Join(e.dir, "unused.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ctxd created its own socket besides the passed one: %v", err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	done <- nil // for the deferred wait
	if _, err := os.Lstat(e.socket); err != nil {
		t.Errorf("the activated socket file was removed: %v", err)
	}
}

// TestTCPListener: a loopback listener with a token requires it; a public
// address without a token refuses to start.
func TestTCPListener(t *testing.T) {
	e := newEnv(t, baseConfig+"\n[daemon]\nauth_token_env = \"CTXD_TEST_TOKEN\"\n")
	cmd := e.command("--listen", "0.0.0.0:0")
	cmd.Env = append(cmd.Env[:len(cmd.Env):len(cmd.Env)], "CTXD_TEST_TOKEN=")
	out, err := refusedOutput(t, cmd)
	if err == nil || !strings.Contains(string(out), "CTXD_TEST_TOKEN") {
		t.Fatalf("a listener with an empty token started: %v\n%s", err, out)
	}

	e2 := newEnv(t, baseConfig)
	out, err = refusedOutput(t, e2.command("--listen", "0.0.0.0:0"))
	if err == nil || !strings.Contains(string(out), "TCP needs a bearer token (it is not even a loopback address)") {
		t.Fatalf("a public listener without a token started: %v\n%s", err, out)
	}
	// A loopback listener without a token used to be open to every
	// local user (another uid listed and created sessions over it).
	out, err = refusedOutput(t, e2.command("--listen", "127.0.0.1:0"))
	if err == nil || !strings.Contains(string(out), "TCP needs a bearer token (every local user can reach a loopback port)") {
		t.Fatalf("a loopback listener without a token started: %v\n%s", err, out)
	}
	e3 := newEnv(t, baseConfig+"\n[daemon]\nlisten = \"127.0.0.1:17411\"\n")
	out, err = refusedOutput(t, e3.command())
	if err == nil || !strings.Contains(string(out), "daemon.listen: TCP needs a bearer token") {
		t.Fatalf("daemon.listen on loopback without a token started: %v\n%s", err, out)
	}
	cmd = e.command("--listen", "127.0.0.1:0")
	cmd.Env = append(cmd.Env[:len(cmd.Env):len(cmd.Env)], "CTXD_TEST_TOKEN=tiny7")
	out, err = refusedOutput(t, cmd)
	if err == nil || !strings.Contains(string(out), "the bearer token in CTXD_TEST_TOKEN is 5 bytes: use at least 16") || strings.Contains(string(out), "tiny7") {
		t.Fatalf("a short token was accepted: %v\n%s", err, out)
	}

	p := &proc{cmd: e.command("--listen", "127.0.0.1:0"), stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = append(p.cmd.Env, "CTXD_TEST_TOKEN=s3cret-token-value")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	defer func() { _ = p.cmd.Process.Kill(); <-p.done }()
	p.waitLog(t, "ctxd started")
	log := p.stderr.String()
	if strings.Contains(log, "s3cret-token-value") {
		t.Fatalf("the token was logged:\n%s", log)
	}
	_, rest, _ := strings.Cut(log, "listen=")
	addr, _, _ := strings.Cut(rest, " ")
	ctx := context.Background()
	if _, err := (&api.Client{BaseURL: "http://" + addr}).Status(ctx); api.ErrorCode(err) != api.Unauthorized {
		t.Fatalf("without the token: %v", err)
	}
	if _, err := (&api.Client{BaseURL: "http://" + addr, Token: "s3cret-token-valuf"}).ListSessions(ctx); api.ErrorCode(err) != api.Unauthorized {
		t.Fatalf("with a wrong token: %v", err)
	}
	if _, err := (&api.Client{BaseURL: "http://" + addr}).CreateSession(ctx, api.CreateSessionRequest{ID: "x", Model: "gpt-4o"}); api.ErrorCode(err) != api.Unauthorized {
		t.Fatalf("create without the token: %v", err)
	}
	if _, err := (&api.Client{BaseURL: "http://" + addr, Token: "s3cret-token-value"}).Status(ctx); err != nil {
		t.Fatalf("with the token: %v", err)
	}
}

// TestDirectoryModes: an existing data directory or configured
// offload.dir open to other users stops the daemon with the chmod that
// fixes it; ctxd's own <data_dir>/offload is tightened; a fresh data
// directory is created 0700.
func TestDirectoryModes(t *testing.T) {
	e := newEnv(t, baseConfig)
	if err := os.MkdirAll(e.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := refusedOutput(t, e.command())
	if err == nil || !strings.Contains(string(out), "data directory "+e.dataDir+" is mode 0755: other users could read what ctxd keeps there (sessions, tool results); run: chmod 700 "+e.dataDir) {
		t.Fatalf("a 0755 data directory was accepted: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused daemon wrote into the data directory: %v", err)
	}

	// A configured offload.dir open to others: refused.
	off := filepath.Join(e.dir, "offload-elsewhere")
	if err := os.Mkdir(off, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(off, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, baseConfig+"\n[offload]\ndir = \""+off+"\"\n")
	out, err = refusedOutput(t, e.command())
	if err == nil || !strings.Contains(string(out), "offload directory "+off+" is mode 0777") || !strings.Contains(string(out), "chmod 700 "+off) {
		t.Fatalf("a 0777 offload.dir was accepted: %v\n%s", err, out)
	}

	// The default offload directory, ctxd's own: tightened, with a warning.
	e.writeConfig(t, baseConfig)
	own := filepath.Join(e.dataDir, "offload")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(own, 0o755); err != nil {
		t.Fatal(err)
	}
	p := e.start(t)
	p.waitLog(t, "offload directory was open to other users")
	if fi, err := os.Stat(own); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("offload directory after start: %v %v", fi.Mode().Perm(), err)
	}
	p.signalAndWait(t, syscall.SIGTERM)

	// A data directory ctxd creates is 0700, parents included.
	e2 := newEnv(t, baseConfig)
	e2.dataDir = filepath.Join(e2.dir, "state", "ctxd")
	e2.start(t)
	for _, d := range []string{e2.dataDir, filepath.Dir(e2.dataDir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v %v, want 0700", d, fi.Mode().Perm(), err)
		}
	}
}
