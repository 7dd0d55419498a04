package checkpoint

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
)

var (
	crashIterations = flag.Int("crash.iterations", 20, "kill -9 rounds of TestCrash")
	crashSeed       = flag.Uint64("crash.seed", 0, "seed of TestCrash (0: from the clock)")
)

const (
	crashDirEnv  = "CTXD_CRASH_DIR"
	crashSeedEnv = "CTXD_CRASH_SEED"
)

var crashSessions = []string{"crash-a", "crash-b", "crash-c", "crash.d"}

// openCrashStores opens the log and artifact store in dir as the daemon
// would: the secret in the data dir, badger under it, sync_writes on.
func openCrashStores(dir string) (*Store, *artifacts.Store, func(), error) {
	secret, err := artifacts.LoadSecret(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	db, err := store.Open(filepath.Join(dir, "db"), store.Options{SyncWrites: true})
	if err != nil {
		return nil, nil, nil, err
	}
	arts, err := artifacts.Open(db, secret)
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	log := Open(db, Options{})
	return log, arts, func() { log.Close(); arts.Close(); db.Close() }, nil
}

// TestCrashChild is the process TestCrash kills. It appends events, retains
// artifacts and writes checkpoints in a loop, printing each acknowledged
// write on stdout:
//
//	A <artifact id>
//	E <session> <first seq> <count>
//	C <session> <checkpoint seq>
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestCrash only")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
	log, arts, closeAll, err := openCrashStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	for _, s := range crashSessions {
		if _, err := log.CreateSession(bg, s, Meta{Model: "m"}); err != nil && !errors.Is(err, ErrExists) {
			t.Fatal(err)
		}
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	// Several writers at once, so that kills land inside group commits.
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		rng := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
		go func() {
			defer wg.Done()
			var refs []artifacts.ID
			for i := 0; time.Now().Before(deadline); i++ {
				session := crashSessions[rng.IntN(len(crashSessions))]
				if rng.IntN(2) == 0 {
					// Small artifacts stay inline, large ones go to the
					// value log.
					content := []byte(strings.Repeat(fmt.Sprintf("w%d i%d %x\n", w, i, rng.Uint64()), 1+rng.IntN(600)))
					id, err := arts.Retain(bg, content, artifacts.FormatText)
					if err != nil {
						t.Error(err)
						return
					}
					say("A %s", id)
					refs = append(refs, id)
				}
				n := 1 + rng.IntN(4)
				evs := make([]Event, n)
				for j := range evs {
					if rng.IntN(3) == 0 {
						text := strings.Repeat("tool output line\n", 1+rng.IntN(400))
						evs[j] = Event{Kind: KindMessage, Message: &history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: text}}}}
						continue
					}
					d := map[string]any{"w": w, "i": i, "j": j}
					if len(refs) > 0 {
						d["ref"] = refs[rng.IntN(len(refs))].URI()
					}
					b, _ := json.Marshal(d)
					evs[j] = Event{Kind: KindOffload, Data: b}
				}
				first, err := log.Append(bg, session, evs)
				if err != nil {
					t.Error(err)
					return
				}
				say("E %s %d %d", session, first, n)
				if rng.IntN(6) == 0 {
					last, err := log.LastSeq(bg, session)
					if err != nil {
						t.Error(err)
						return
					}
					prev, _, err := log.Latest(bg, session)
					if err != nil {
						t.Error(err)
						return
					}
					snap := max(prev.SnapshotSeq, last-uint64(rng.IntN(int(min(last, 5)))))
					// Summaries of either side of the value threshold.
					cp, err := log.PutCheckpoint(bg, session, Checkpoint{
						Summary:     strings.Repeat("summary ", 1+rng.IntN(1500)),
						SnapshotSeq: snap, Binding: "extractive", TokensBefore: 100, TokensAfter: 10,
					})
					if errors.Is(err, ErrInvalid) {
						continue // another writer checkpointed further meanwhile
					}
					if err != nil {
						t.Error(err)
						return
					}
					say("C %s %d", session, cp.Seq)
				}
			}
		}()
	}
	wg.Wait()
}

// acked is what the child acknowledged before it was killed.
type acked struct {
	mu          sync.Mutex
	lines       int
	last        map[string]uint64          // session → highest acknowledged seq
	checkpoints map[string]map[uint64]bool // session → checkpoint seqs
	artifacts   map[artifacts.ID]bool
}

func (a *acked) parse(line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case f[0] == "A" && len(f) == 2:
		id, err := artifacts.ParseID(f[1])
		if err != nil {
			return err
		}
		a.artifacts[id] = true
	case f[0] == "E" && len(f) == 4:
		first, err1 := strconv.ParseUint(f[2], 10, 64)
		n, err2 := strconv.ParseUint(f[3], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		a.last[f[1]] = max(a.last[f[1]], first+n-1)
	case f[0] == "C" && len(f) == 3:
		seq, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return err
		}
		if a.checkpoints[f[1]] == nil {
			a.checkpoints[f[1]] = map[uint64]bool{}
		}
		a.checkpoints[f[1]][seq] = true
		a.last[f[1]] = max(a.last[f[1]], seq)
	default:
		return nil // the test framework's own output
	}
	a.lines++
	return nil
}

// TestCrash kills a writing child process with SIGKILL at random moments
// and checks, after each kill, that the store reopens as it is (no repair
// step) with every acknowledged write present and consistent.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (repeat: go test ./checkpoint -run TestCrash -args -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	a := &acked{last: map[string]uint64{}, checkpoints: map[string]map[uint64]bool{}, artifacts: map[artifacts.ID]bool{}}
	for it := range *crashIterations {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, fmt.Sprintf("%s=%d", crashSeedEnv, rng.Uint64()))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		first := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			once := sync.Once{}
			var perr error
			for sc.Scan() {
				if err := a.parse(sc.Text()); err != nil && perr == nil {
					perr = fmt.Errorf("line %q: %w", sc.Text(), err)
				}
				once.Do(func() { close(first) })
			}
			done <- errors.Join(perr, sc.Err())
		}()
		// Most rounds kill mid-stream, some during startup and recovery.
		if it%5 != 4 {
			select {
			case <-first:
			case <-time.After(30 * time.Second):
				t.Fatal("child wrote nothing in 30 s")
			}
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err == nil {
			t.Fatal("child exited before it was killed")
		}
		verifyCrash(t, dir, a)
		if t.Failed() {
			t.Fatalf("round %d: inconsistent store after kill -9", it)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t.Logf("%d rounds, %d acknowledged writes, %d artifacts", *crashIterations, a.lines, len(a.artifacts))
	if a.lines == 0 {
		t.Fatal("no acknowledged writes: the test tested nothing")
	}
}

func verifyCrash(t *testing.T, dir string, a *acked) {
	t.Helper()
	ctx := context.Background()
	log, arts, closeAll, err := openCrashStores(dir)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer closeAll()
	a.mu.Lock()
	defer a.mu.Unlock()
	ids, err := log.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, id := range ids {
		listed[id] = true
	}
	for s := range a.last {
		if !listed[s] {
			t.Errorf("session %s with acknowledged events is missing", s)
		}
	}
	for _, s := range ids {
		var n uint64
		cpEvents := map[uint64]CheckpointEvent{}
		err := log.Range(ctx, s, 1, func(e Event) error {
			n++
			if e.Seq != n {
				return fmt.Errorf("seq %d where %d was due: not contiguous", e.Seq, n)
			}
			if e.Message != nil && e.Message.Seq != e.Seq {
				return fmt.Errorf("event %d: message seq %d", e.Seq, e.Message.Seq)
			}
			for _, id := range artifacts.FindRefs(e.Data) {
				if _, _, err := arts.Get(ctx, id); err != nil {
					return fmt.Errorf("event %d refers to an artifact: %w", e.Seq, err)
				}
			}
			if e.Kind == KindCheckpoint {
				var ce CheckpointEvent
				if err := json.Unmarshal(e.Data, &ce); err != nil {
					return fmt.Errorf("checkpoint event %d: %w", e.Seq, err)
				}
				cpEvents[e.Seq] = ce
			}
			return nil
		})
		if err != nil {
			t.Errorf("session %s: %v", s, err)
			continue
		}
		if n < a.last[s] {
			t.Errorf("session %s: %d events, but seq %d was acknowledged", s, n, a.last[s])
		}
		cps, err := log.ListCheckpoints(ctx, s)
		if err != nil {
			t.Errorf("session %s: %v", s, err)
			continue
		}
		// Record, event and meta are all there, or none: no half-written
		// checkpoint.
		if len(cps) != len(cpEvents) {
			t.Errorf("session %s: %d checkpoint records but %d checkpoint events", s, len(cps), len(cpEvents))
		}
		for _, cp := range cps {
			ce, ok := cpEvents[cp.Seq]
			if !ok || ce != cp.event() {
				t.Errorf("session %s: checkpoint %d has no matching event", s, cp.Seq)
			}
			if cp.SummaryBytes != uint64(len(cp.Summary)) || cp.SnapshotSeq >= cp.Seq {
				t.Errorf("session %s: checkpoint %d is inconsistent: %d bytes of %d, snapshot %d", s, cp.Seq, len(cp.Summary), cp.SummaryBytes, cp.SnapshotSeq)
			}
		}
		meta, err := log.GetMeta(ctx, s)
		if err != nil {
			t.Errorf("session %s: %v", s, err)
			continue
		}
		var latest uint64
		if len(cps) > 0 {
			latest = cps[len(cps)-1].Seq
		}
		if meta.LatestCheckpoint != latest || meta.Checkpoints != uint64(len(cps)) {
			t.Errorf("session %s: meta says checkpoint %d of %d, records say %d of %d", s, meta.LatestCheckpoint, meta.Checkpoints, latest, len(cps))
		}
		for seq := range a.checkpoints[s] {
			if _, ok := cpEvents[seq]; !ok {
				t.Errorf("session %s: acknowledged checkpoint %d is missing", s, seq)
			}
		}
	}
	for id := range a.artifacts {
		if _, _, err := arts.Get(ctx, id); err != nil {
			t.Errorf("acknowledged artifact: %v", err)
		}
	}
	if _, err := arts.Verify(ctx); err != nil {
		t.Errorf("artifacts: %v", err)
	}
}
