package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
	"github.com/ctxd/ctxd/summarizer"
)

// fleetNode is one ctxd node of a fleet (docs/design.md §9): an engine on the
// shared NATS store and its proxy, on a loopback port.
func fleetNode(t *testing.T, c *natstest.Cluster, up *upstream) *fixture {
	t.Helper()
	st, err := natstest.OpenStore(c, natsstore.Options{Prefix: "fleet", Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	arts, err := st.Artifacts(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	q, err := st.Queue(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Storage.DataDir = t.TempDir()
	cfg.Proxy.Upstreams.Anthropic.BaseURL = up.srv.URL
	f := &fixture{t: t, up: up, cfg: cfg}
	f.eng, err = engine.New(engine.Options{Config: cfg, Log: st.Log(), Artifacts: arts, Pool: q, Shared: true,
		Summarizer: summarizer.New(summarizer.Options{RetryMax: -1}), OffloadDir: cfg.Storage.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	if f.p, err = New(Options{Engine: f.eng, Secret: testSecret, Config: cfg.Proxy}); err != nil {
		t.Fatal(err)
	}
	f.serve()
	t.Cleanup(func() { _ = f.hs.Close(); _ = st.Close() })
	return f
}

// TestFleetProxiesAlternateTurns: two nodes on one NATS store, each with
// its proxy, serve one conversation turn by turn alternately:
// each proxy catches up on what the other recorded, so the upstream
// receives exactly the client's messages every turn and the log holds
// each message once, in one session.
func TestFleetProxiesAlternateTurns(t *testing.T) {
	c, err := natstest.Start(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	up := newUpstream(t)
	nodes := []*fixture{fleetNode(t, c, up), fleetNode(t, c, up)}
	conv := newConversation()
	var id string
	const turns = 6
	for i := range turns {
		f := nodes[i%2]
		conv.user(fmt.Sprintf("question %d", i))
		resp, body := f.post(conv.body(), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d on node %d: %d %s", i, i%2, resp.StatusCode, body)
		}
		f.settle()
		if got := resp.Header.Get(HeaderSessionID); id == "" {
			id = got
		} else if got != id {
			t.Fatalf("turn %d on node %d went to session %s, want %s", i, i%2, got, id)
		}
		reqs := up.requests()
		out := outgoingMessages(t, reqs[len(reqs)-1].body)
		if len(out) != len(conv.msgs) {
			t.Fatalf("turn %d on node %d: upstream got %d messages, the client sent %d", i, i%2, len(out), len(conv.msgs))
		}
		for k, m := range out {
			var want map[string]any
			if err := json.Unmarshal([]byte(conv.msgs[k]), &want); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(m["role"]) != fmt.Sprint(want["role"]) || textOf(m) != textOf(want) {
				t.Fatalf("turn %d message %d: upstream got %v, the client sent %v", i, k, m, want)
			}
		}
		conv.assistant(assistantText("ok"))
	}
	// The log: each message once, in order (user, assistant, …).
	var texts []string
	err = nodes[0].eng.Events(context.Background(), id, 1, false, func(ev checkpoint.Event) error {
		if ev.Kind == checkpoint.KindMessage {
			texts = append(texts, string(ev.Message.Role)+":"+ev.Message.Content[0].Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) != 2*turns {
		t.Fatalf("the log holds %d messages, want %d: %q", len(texts), 2*turns, texts)
	}
	for i := range turns {
		if want := fmt.Sprintf("user:question %d", i); texts[2*i] != want {
			t.Fatalf("log message %d is %q, want %q (all: %q)", 2*i, texts[2*i], want, texts)
		}
	}
	if _, err := nodes[0].eng.ClientState(context.Background(), engine.ProxySessionID(testSecret, firstKey(nodes[0]), 1)); err == nil {
		t.Fatal("a second branch was started")
	}
}

func firstKey(f *fixture) string {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	for k := range f.p.lanes {
		return k
	}
	return ""
}

// textOf is the text of a decoded message's blocks, joined.
func textOf(m map[string]any) string {
	var s string
	blocks, _ := m["content"].([]any)
	for _, b := range blocks {
		if bm, ok := b.(map[string]any); ok {
			s += fmt.Sprint(bm["text"])
		}
	}
	return s
}
