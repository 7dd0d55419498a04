package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/config"
)

// What the proxy holds of the conversations it serves stays under
// proxy.memory_bytes: with the smallest bound (1 MiB) and conversations
// whose caches take ~0.3 MB each, after every request the estimate is
// under the bound, the least recently used conversations' caches are
// dropped, and a dropped conversation's next request is managed as
// before: it extends its branch, and the upstream gets its whole history.
func TestProxyMemoryBoundedInBytes(t *testing.T) {
	cfg := testConfig()
	cfg.Proxy.MemoryBytes = config.MinProxyMemoryBytes
	f := newFixture(t, cfg)
	const n = 8
	convs := make([]*conversation, n)
	send := func(c *conversation) {
		t.Helper()
		resp, body := f.post(c.body(), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %.300s", resp.StatusCode, body)
		}
		f.settle()
		if got := memoryBytes(f.p); got > int64(cfg.Proxy.MemoryBytes) {
			t.Fatalf("the proxy holds %d bytes, bound %d", got, cfg.Proxy.MemoryBytes)
		}
	}
	for i := range convs {
		c := newConversation()
		c.extra = strings.Replace(c.extra, "11111111-2222-3333-4444-555555555555", fmt.Sprintf("11111111-2222-3333-4444-%012d", i), 1)
		// ~120 KB of plain text: kept whole (only tool results are
		// offloaded), so each branch's caches hold about twice that.
		c.user(fmt.Sprintf("conversation %d: %s", i, strings.Repeat("the build log says nothing new; ", 4000)))
		convs[i] = c
		send(c)
	}
	f.p.mu.Lock()
	cached := len(f.p.encOrder)
	f.p.mu.Unlock()
	if cached >= n || cached == 0 {
		t.Fatalf("%d of %d branches keep their caches under a 1 MiB bound", cached, n)
	}
	before := f.p.Stats()
	c := convs[0]
	c.assistant(assistantText("ok"))
	c.user("and now?")
	send(c)
	after := f.p.Stats()
	if after.Managed != before.Managed+1 || after.Branches != before.Branches || after.PassedThrough != before.PassedThrough {
		t.Fatalf("the dropped conversation's next request: %+v, before %+v", after, before)
	}
	reqs := f.up.requests()
	last := outgoingMessages(t, reqs[len(reqs)-1].body)
	if len(last) != 3 || !strings.HasPrefix(fmt.Sprint(last[0]["content"]), "[map[text:conversation 0:") {
		t.Fatalf("the upstream got %d messages: %.200v", len(last), last)
	}
}

// memoryBytes is p's estimate of what it holds of the conversations it
// serves, in bytes (what proxy.memory_bytes bounds).
func memoryBytes(p *Proxy) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.laneBytes + p.cacheBytes
}
