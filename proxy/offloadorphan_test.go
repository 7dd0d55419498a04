package proxy

import (
	"context"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// offloadLeft lists what the offload directory of f holds (files and
// session directories; the fixture's is its data directory, its store
// being in memory), or nil when it holds nothing.
func offloadLeft(t *testing.T, f *fixture) []string {
	t.Helper()
	root := f.cfg.Storage.DataDir
	var left []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if p != root {
			left = append(left, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// orphanConversation is a conversation's first request whose tool result
// ctxd offloads before forwarding it: under coldBytes, so that the request
// is managed in full (a larger one goes cold, offloaded once accepted,
// unless its credential was accepted before).
func orphanConversation() *conversation {
	return newConversation().user("build it").
		assistant(assistantCall("toolu_X1", "Bash", `{"command":"make"}`)).
		results([2]string{"toolu_X1", strings.Repeat("build output line\n", 10000)})
}

// TestDiscardedFirstRequestLeavesNoOffloadFile: a conversation's first
// request offloads its large tool result before it is forwarded; when the
// client leaves before the upstream's first byte, or the upstream refuses
// it (401), no session is kept, and neither is the offloaded file nor its
// session's directory; nor are they when the session cannot be stored
// once the upstream accepted it (a failing disk).
func TestDiscardedFirstRequestLeavesNoOffloadFile(t *testing.T) {
	t.Run("client gone", func(t *testing.T) {
		slowURL, arrived := stallingUpstream(t)
		g := newFixture(t, testConfig())
		g.cfg.Proxy.Upstreams.Anthropic.BaseURL = slowURL
		g.restart()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/messages", strings.NewReader(orphanConversation().body()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", testKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("X-Ctxd-Session", "orphan-stall-1")
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}()
		<-arrived
		if len(offloadLeft(t, g)) == 0 {
			t.Fatal("the tool result was not offloaded before the request was forwarded")
		}
		cancel()
		<-done
		g.settle()
		if ids := g.sessions(); len(ids) != 0 {
			t.Fatalf("a client gone before the first byte left sessions %v", ids)
		}
		if left := offloadLeft(t, g); len(left) != 0 {
			t.Fatalf("a client gone before the first byte left in the offload directory: %v", left)
		}
	})
	t.Run("refused", func(t *testing.T) {
		f := newFixture(t, testConfig())
		f.up.script(reply{status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`})
		resp, _ := f.post(orphanConversation().body(), nil)
		if resp.StatusCode != 401 {
			t.Fatalf("the client got %d", resp.StatusCode)
		}
		f.settle()
		if ids := f.sessions(); len(ids) != 0 {
			t.Fatalf("a refused first request left sessions %v", ids)
		}
		if left := offloadLeft(t, f); len(left) != 0 {
			t.Fatalf("a refused first request left in the offload directory: %v", left)
		}
	})
	t.Run("commit fails", func(t *testing.T) {
		f, w := watched(t)
		w.fail.Store(true)
		f.up.script(textAnswer("answer one"))
		resp, _ := f.post(orphanConversation().body(), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("the client got %d", resp.StatusCode)
		}
		if err := f.p.WaitRecords(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.settle()
		if ids, err := f.cps.ListSessions(context.Background()); err != nil || len(ids) != 0 {
			t.Fatalf("stored sessions %v, %v: want none", ids, err)
		}
		if left := offloadLeft(t, f); len(left) != 0 {
			t.Fatalf("a first request whose record failed left in the offload directory: %v", left)
		}
	})
}
