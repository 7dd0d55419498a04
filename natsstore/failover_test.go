package natsstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// TestServerKilledDuringAppends: 8 writers append to 8 sessions of an R3
// stream; one of the 3 servers is killed in the middle and started again.
// Every acknowledged append is in the log at the seq it was acknowledged
// with, each session's seqs are contiguous, and appends go on after the
// cluster re-forms.
func TestServerKilledDuringAppends(t *testing.T) {
	c, err := natstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	st := openOn(t, c, "kill", 3)
	l := st.Log()
	ctx := context.Background()
	const writers = 8
	for w := range writers {
		if _, err := l.CreateSession(ctx, fmt.Sprintf("s%d", w), checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := make([]map[uint64]string, writers) // per session: seq → text acknowledged
	for w := range got {
		got[w] = map[uint64]string{}
	}
	var failed, total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("s%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				text := fmt.Sprintf("%s-%d", id, i)
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				seq, err := l.Append(actx, id, []checkpoint.Event{{Kind: checkpoint.KindMessage, Message: &history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: text}}}}})
				cancel()
				total.Add(1)
				if err != nil {
					failed.Add(1) // not acknowledged: may or may not be stored
					time.Sleep(50 * time.Millisecond)
					continue
				}
				mu.Lock()
				got[w][seq] = text
				mu.Unlock()
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	c.Kill(1)
	killedAt := total.Load()
	time.Sleep(2 * time.Second)
	if err := c.Restart(1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	afterRestart := total.Load()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d appends, %d not acknowledged; %d before the kill, %d by the restart", total.Load(), failed.Load(), killedAt, afterRestart)
	if total.Load() <= afterRestart {
		t.Fatal("no append after the restart")
	}

	// A node that knows nothing yet (a fresh connection) reads it all.
	l2 := openOn(t, c, "kill", 3).Log()
	for w := range writers {
		id := fmt.Sprintf("s%d", w)
		want := uint64(1)
		stored := map[uint64]string{}
		err := l2.Range(ctx, id, 1, func(ev checkpoint.Event) error {
			if ev.Seq != want {
				return fmt.Errorf("seq %d, want %d", ev.Seq, want)
			}
			want++
			stored[ev.Seq] = ev.Message.Content[0].Text
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		for seq, text := range got[w] {
			if stored[seq] != text {
				t.Fatalf("%s: acknowledged %q at seq %d, stored %q", id, text, seq, stored[seq])
			}
		}
		if len(got[w]) == 0 {
			t.Fatalf("%s: nothing acknowledged", id)
		}
	}
}
