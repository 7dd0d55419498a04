package natsstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// appendLoad is writers appending numbered texts to sessions s0…sN of a
// log until stop, each append with its own time limit; it records what was
// acknowledged at which seq and every failure.
type appendLoad struct {
	mu     sync.Mutex
	acked  []map[uint64]string
	errs   []error
	total  atomic.Int64
	stop   chan struct{}
	wg     sync.WaitGroup
	writer int
}

func startAppends(t *testing.T, l *natsstore.Log, writers int, limit time.Duration) *appendLoad {
	t.Helper()
	ctx := context.Background()
	a := &appendLoad{stop: make(chan struct{}), writer: writers}
	for w := range writers {
		if _, err := l.CreateSession(ctx, fmt.Sprintf("s%d", w), checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		a.acked = append(a.acked, map[uint64]string{})
	}
	for w := range writers {
		a.wg.Go(func() {
			id := fmt.Sprintf("s%d", w)
			for i := 0; ; i++ {
				select {
				case <-a.stop:
					return
				default:
				}
				text := fmt.Sprintf("%s-%d", id, i)
				actx, cancel := context.WithTimeout(ctx, limit)
				seq, err := l.Append(actx, id, []checkpoint.Event{{Kind: checkpoint.KindMessage, Message: &history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: text}}}}})
				cancel()
				a.total.Add(1)
				a.mu.Lock()
				if err != nil {
					a.errs = append(a.errs, err)
				} else {
					a.acked[w][seq] = text
				}
				a.mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	return a
}

func (a *appendLoad) halt() {
	close(a.stop)
	a.wg.Wait()
}

// check reads every session through l: seqs contiguous from 1, every
// acknowledged text at its seq, no text stored twice. It returns how many
// appends were stored.
func (a *appendLoad) check(t *testing.T, l *natsstore.Log) int {
	t.Helper()
	stored := 0
	for w := range a.writer {
		id := fmt.Sprintf("s%d", w)
		want := uint64(1)
		at := map[uint64]string{}
		seen := map[string]uint64{}
		err := l.Range(context.Background(), id, 1, func(ev checkpoint.Event) error {
			if ev.Seq != want {
				return fmt.Errorf("seq %d, want %d", ev.Seq, want)
			}
			want++
			text := ev.Message.Content[0].Text
			if prev, dup := seen[text]; dup {
				return fmt.Errorf("%q stored twice, at seqs %d and %d", text, prev, ev.Seq)
			}
			seen[text] = ev.Seq
			at[ev.Seq] = text
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		for seq, text := range a.acked[w] {
			if at[seq] != text {
				t.Fatalf("%s: acknowledged %q at seq %d, stored %q", id, text, seq, at[seq])
			}
		}
		stored += len(at)
	}
	return stored
}

// streamLeader returns the index in c of the server leading the stream.
func streamLeader(t *testing.T, c *natstest.Cluster, st *natsstore.Store, name string) int {
	t.Helper()
	js, err := jetstream.New(st.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream %s has no leader", name)
	}
	i, ok := c.Index(info.Cluster.Leader)
	if !ok {
		t.Fatalf("leader %q is none of the cluster's servers", info.Cluster.Leader)
	}
	return i
}

// TestLeaderStepdownsRiddenOut: while writers append, the leaders of the
// events stream and of the metadata bucket are made to step down (a
// graceful restart of their server) three times each. Every append is
// acknowledged — JetStream's "temporarily unavailable" and unanswered
// requests during the elections are retried (docs/decisions.md "Transient
// JetStream errors and uncertain writes") — and none is stored twice.
func TestLeaderStepdownsRiddenOut(t *testing.T) {
	prefix := newPrefix("step")
	st := open(t, 3, func(o *natsstore.Options) { o.Prefix = prefix })
	a := startAppends(t, st.Log(), 4, natstest.Scale(30*time.Second))
	up := strings.ToUpper(prefix)
	for range 3 {
		for _, name := range []string{up + "_EVENTS", "KV_" + up + "_META"} {
			time.Sleep(300 * time.Millisecond)
			if _, err := st.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+name, nil, 5*time.Second); err != nil {
				t.Fatalf("step down %s: %v", name, err)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	a.halt()
	if len(a.errs) > 0 {
		t.Fatalf("%d of %d appends failed, first: %v", len(a.errs), a.total.Load(), a.errs[0])
	}
	n := a.check(t, openOn(t, sharedCluster(t), prefix, 3).Log())
	t.Logf("%d appends acknowledged and stored once across 6 leader elections", n)
}

// TestStreamLeaderKilledNoDuplicate: the server leading the events stream
// is killed (kill -9 of a server) while writers append, and started again.
// Appends in flight ride out the election instead of failing with a time
// limit; every acknowledged append is stored once at its seq, and none
// is stored twice though some were retried after getting no answer.
func TestStreamLeaderKilledNoDuplicate(t *testing.T) {
	c, err := natstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	st := openOn(t, c, "lk", 3)
	a := startAppends(t, st.Log(), 4, natstest.Scale(30*time.Second))
	time.Sleep(500 * time.Millisecond)
	leader := streamLeader(t, c, st, "LK_EVENTS")
	c.Kill(leader)
	killedAt := a.total.Load()
	time.Sleep(3 * time.Second)
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(natstest.Scale(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	afterRestart := a.total.Load()
	time.Sleep(time.Second)
	a.halt()
	for _, err := range a.errs {
		t.Errorf("append failed: %v", err)
	}
	if a.total.Load() <= afterRestart || afterRestart <= killedAt {
		t.Fatalf("appends: %d before the kill, %d by the restart, %d in all", killedAt, afterRestart, a.total.Load())
	}
	n := a.check(t, openOn(t, c, "lk", 3).Log())
	t.Logf("leader %d killed: %d appends, %d failed, %d stored", leader, a.total.Load(), len(a.errs), n)
}

// TestRollingRestartThenFullOutage: on a cluster whose servers fsync
// before they acknowledge (sync_interval: always), writers append while
// the three servers are restarted one after the other — every append is
// acknowledged, riding out each election — then while all three are down
// at once and started again: an append in that outage waits for the
// cluster (within its bound) or fails as unavailable — nothing is
// acknowledged without a quorum — appends go on once the cluster is back,
// and every acknowledged append is stored once, at its seq.
func TestRollingRestartThenFullOutage(t *testing.T) {
	c, err := natstest.StartSync(t.TempDir(), 3, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	st := openOn(t, c, "roll", 3)
	a := startAppends(t, st.Log(), 4, natstest.Scale(30*time.Second))
	for i := range 3 {
		time.Sleep(500 * time.Millisecond)
		c.Kill(i)
		time.Sleep(time.Second)
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(natstest.Scale(30 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	a.mu.Lock()
	rolling, rollErrs := a.total.Load(), slices.Clone(a.errs)
	a.mu.Unlock()
	for _, err := range rollErrs {
		t.Errorf("append failed during the rolling restart: %v", err)
	}

	for i := range 3 {
		c.Kill(i)
	}
	time.Sleep(time.Second)
	for i := range 3 {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(natstest.Scale(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	back := a.total.Load()
	deadline := time.Now().Add(natstest.Scale(30 * time.Second))
	for {
		a.mu.Lock()
		ok := 0
		for w := range a.writer {
			ok += len(a.acked[w])
		}
		a.mu.Unlock()
		if a.total.Load() > back+20 && ok > int(rolling) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("appends did not resume after the outage: %d tried, %d acknowledged", a.total.Load(), ok)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.halt()
	n := a.check(t, openOn(t, c, "roll", 3).Log())
	t.Logf("%d appends during the rolling restart, 0 failed; %d in all, %d failed during the full outage, %d stored", rolling, a.total.Load(), len(a.errs)-len(rollErrs), n)
}
