package quota

import (
	"context"
	"errors"
	"strings"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"slices"
	"testing"
	"time"
)

// Expiry keeps a session that a live fork inherited from (the fork's
// offload stubs name the parent's files), directly or through another
// fork, and expires it with its last live heir; a branch that inherited
// nothing (Inherits unset: the client's own compaction) never holds
// its parent.
func TestExpiryKeepsWhatALiveForkInherited(t *testing.T) {
	now := time.Now()
	old, live := now.Add(-48*time.Hour), now
	info := func(id string, updated time.Time, inherits string) Activity {
		return Activity{ID: id, Updated: updated, Inherits: inherits}
	}
	cut := now.Add(-24 * time.Hour)
	for _, tc := range []struct {
		name string
		all  []Activity
		want []string
	}{
		{"a live fork holds its parent and grandparent", []Activity{info("a", old, ""), info("b", old, "a"), info("c", live, "b"), info("x", old, "")}, []string{"x"}},
		{"an expired fork holds nothing", []Activity{info("a", old, ""), info("b", old, "a")}, []string{"a", "b"}},
		{"a branch that inherited nothing", []Activity{info("a", old, ""), info("b", live, "")}, []string{"a"}},
	} {
		if got := Expirable(tc.all, cut); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Expirable %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The table is seeded from the store once, refuses a new session or more
// bytes at a credential's quotas (naming the key), and uncounts a
// forgotten session.
func TestTableRefusesAtItsQuotas(t *testing.T) {
	seeds := 0
	tb := New(func(context.Context) ([]Stored, error) {
		seeds++
		return []Stored{{ID: "p-a", Credential: "aaaaaaaaaaaa", Bytes: 40}, {ID: "p-b", Credential: "bbbbbbbbbbbb", Bytes: 10}}, nil
	})
	ctx := context.Background()
	fpA, fpC := "aaaaaaaaaaaa0123", "cccccccccccc0123"
	q := config.ProxyQuotas{Sessions: 1, Bytes: 50}
	if err := tb.Check(ctx, q, fpA); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "proxy.quotas.sessions") {
		t.Fatalf("a second session of A: %v, want the sessions quota", err)
	}
	if err := tb.Check(ctx, q, fpC); err != nil {
		t.Fatalf("a first session of C: %v", err)
	}
	if err := tb.Grow(ctx, q, fpA, "p-a", 11); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "proxy.quotas.bytes") {
		t.Fatalf("11 bytes more for A: %v, want the bytes quota", err)
	}
	if err := tb.Grow(ctx, q, fpA, "p-a", 10); err != nil {
		t.Fatalf("10 bytes more for A: %v", err)
	}
	tb.Add(fpA, "p-a", 10)
	tb.Count(fpC, "p-c")
	us, err := tb.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Usage{{Credential: "aaaaaaaaaaaa", Sessions: 1, Bytes: 50}, {Credential: "bbbbbbbbbbbb", Sessions: 1, Bytes: 10}, {Credential: "cccccccccccc", Sessions: 1}}
	if !slices.Equal(us, want) {
		t.Fatalf("usage %v, want %v", us, want)
	}
	tb.Forget("p-a")
	if err := tb.Check(ctx, q, fpA); err != nil {
		t.Fatalf("A after its session was forgotten: %v", err)
	}
	if seeds != 1 {
		t.Fatalf("seeded %d times, want 1", seeds)
	}
}

// A message counts its blocks' text, tool inputs and signatures.
func TestBytesOfMessages(t *testing.T) {
	msgs := []history.Message{
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockThinking, Text: "hmm", Signature: "sig"}, {Type: history.BlockToolCall, Input: []byte(`{"a":1}`)}}},
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "hello"}}},
	}
	if n := Bytes(msgs); n != 3+3+7+5 {
		t.Fatalf("%d bytes, want 18", n)
	}
}
