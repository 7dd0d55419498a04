package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/store"
)

// benchEvent is a 1 KiB event: a diagnostic whose payload makes the
// encoded value 1024 bytes.
func benchEvent(tb testing.TB) (Event, []byte) {
	e := Event{Kind: KindDiagnostic, Time: t0}
	head, err := encodeEvent(&e)
	if err != nil {
		tb.Fatal(err)
	}
	e.Data = json.RawMessage(`"` + strings.Repeat("x", 1024-len(head)-2) + `"`)
	v, err := encodeEvent(&e)
	if err != nil || len(v) != 1024 {
		tb.Fatalf("encoded event is %d bytes, %v", len(v), err)
	}
	return e, v
}

// parallel64 runs b.N operations spread over 64 goroutines, goroutine g
// calling op(g, i) for its i-th operation.
func parallel64(b *testing.B, op func(g int, i uint64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); next.Add(1) <= int64(b.N); i++ {
				if err := op(g, i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
}

// BenchmarkAppend64Sessions: 64 sessions appending one 1 KiB event each
// per call, concurrently, on disk with sync_writes = true. Compare with
// BenchmarkBaselineWriteBatch64 (goal: ≥ 0.8× its throughput).
func BenchmarkAppend64Sessions(b *testing.B) {
	st := newDiskStore(b, b.TempDir())
	for g := range 64 {
		create(b, st, fmt.Sprint("bench-", g))
	}
	e, _ := benchEvent(b)
	b.SetBytes(1024)
	before := st.commit.Stats()
	parallel64(b, func(g int, _ uint64) error {
		_, err := st.Append(bg, fmt.Sprint("bench-", g), []Event{e})
		return err
	})
	after := st.commit.Stats()
	if groups := after.Groups - before.Groups; groups > 0 {
		b.ReportMetric(float64(after.Calls-before.Calls)/float64(groups), "appends/sync")
	}
}

// BenchmarkBaselineWriteBatch64 writes the same bytes under the same keys
// with bare badger, same options and concurrency: each of 64 goroutines
// flushes its own WriteBatch of one entry per operation.
func BenchmarkBaselineWriteBatch64(b *testing.B) {
	db, err := store.Open(b.TempDir(), store.Options{SyncWrites: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	_, v := benchEvent(b)
	b.SetBytes(1024)
	parallel64(b, func(g int, i uint64) error {
		wb := db.NewWriteBatch()
		defer wb.Cancel()
		if err := wb.Set(seqKey(eventPrefix(fmt.Sprint("bench-", g)), i+1), v); err != nil {
			return err
		}
		return wb.Flush()
	})
}

// fill appends n 1 KiB events to session in calls of 100.
func fill(tb testing.TB, st *Store, session string, n int) {
	e, _ := benchEvent(tb)
	evs := make([]Event, 100)
	for i := range evs {
		evs[i] = e
	}
	for done := 0; done < n; done += 100 {
		if _, err := st.Append(bg, session, evs[:min(100, n-done)]); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkRange10k scans one session's 10,000 events (1 KiB each) in a
// store of 100 sessions (the other 99 with 1,000 events each).
func BenchmarkRange10k(b *testing.B) {
	st := newDiskStore(b, b.TempDir())
	var wg sync.WaitGroup
	for s := range 100 {
		create(b, st, fmt.Sprint("range-", s))
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := w; s < 100; s += 4 {
				n := 1000
				if s == 42 {
					n = 10000
				}
				fill(b, st, fmt.Sprint("range-", s), n)
			}
		}()
	}
	wg.Wait()
	b.SetBytes(10000 * 1024)
	b.ResetTimer()
	for range b.N {
		n := 0
		if err := st.Range(bg, "range-42", 1, func(Event) error { n++; return nil }); err != nil || n != 10000 {
			b.Fatalf("%d events, %v", n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/event")
}

func heapInUse() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20)
}

// settledHeap polls the heap every second until it has not moved by more
// than 1 MiB in 5 s, for at most 40 s: badger's allocator pool returns one
// compaction buffer per 2 s of idleness.
func settledHeap() float64 {
	readings := []float64{heapInUse()}
	for range 40 {
		time.Sleep(time.Second)
		readings = append(readings, heapInUse())
		if n := len(readings); n > 5 && readings[n-6]-readings[n-1] < 1 {
			break
		}
	}
	return readings[len(readings)-1]
}

// TestHeapEmpty asserts the small-memory profile: an empty store on disk
// adds at most 32 MiB of Go heap (measured ~11 MiB: two memtable arenas,
// caches; badger's defaults add ~86 MiB). The bound is generous because
// the figure is stable: arenas are allocated up front.
func TestHeapEmpty(t *testing.T) {
	base := heapInUse()
	db, err := store.Open(t.TempDir(), store.Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := Open(db, Options{})
	defer st.Close()
	if got := heapInUse() - base; got > 32 {
		t.Fatalf("empty store holds %.1f MiB of heap, want ≤ 32", got)
	} else {
		t.Logf("empty store: %.1f MiB of heap", got)
	}
}

// BenchmarkHeap reports the Go heap in use (MiB) added by: badger with its
// default options, empty; our profile, empty; right after writing 100
// sessions × 1,000 events of 1 KiB (compaction buffers in flight);
// settled once background work is done; and after reopening the store
// holding that data. Goal: ≤ 64 MiB. Run with -benchtime 1x.
func BenchmarkHeap(b *testing.B) {
	for range b.N {
		base := heapInUse()
		db, err := badger.Open(badger.DefaultOptions(b.TempDir()).WithLogger(nil))
		if err != nil {
			b.Fatal(err)
		}
		defaults := heapInUse() - base
		db.Close()

		dir := b.TempDir()
		base = heapInUse()
		db, err = store.Open(dir, store.Options{SyncWrites: true})
		if err != nil {
			b.Fatal(err)
		}
		st := Open(db, Options{})
		empty := heapInUse() - base
		for s := range 100 {
			create(b, st, fmt.Sprint("heap-", s))
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := w; s < 100; s += 4 {
					fill(b, st, fmt.Sprint("heap-", s), 1000)
				}
			}()
		}
		wg.Wait()
		peak := heapInUse() - base
		settled := settledHeap() - base
		st.Close()
		db.Close()

		base = heapInUse()
		db, err = store.Open(dir, store.Options{SyncWrites: true})
		if err != nil {
			b.Fatal(err)
		}
		st = Open(db, Options{})
		if last, err := st.LastSeq(bg, "heap-7"); err != nil || last != 1000 {
			b.Fatalf("reopened: last seq %d, %v", last, err)
		}
		reopened := heapInUse() - base
		st.Close()
		db.Close()

		b.ReportMetric(defaults, "MiB-badger-defaults-empty")
		b.ReportMetric(empty, "MiB-empty")
		b.ReportMetric(peak, "MiB-100x1000-peak")
		b.ReportMetric(settled, "MiB-100x1000-settled")
		b.ReportMetric(reopened, "MiB-100x1000-reopened")
	}
}

// BenchmarkListing compares one page of the session listing (ListPage,
// 100 sessions with their metadata, row and last seq) with listing every
// id (ListSessions, what GET /v1/sessions built its answer from before
// pages) over the same store (docs/decisions.md "Listing sessions a page
// at a time"): the page's cost does not grow
// with the sessions stored. 2,000 sessions, or 50,000 with
// CTXD_BENCH_FULL=1.
func BenchmarkListing(b *testing.B) {
	n := 2000
	if os.Getenv("CTXD_BENCH_FULL") == "1" {
		n = 50000
	}
	st, _ := newStore(b)
	ev := []Event{msg(history.RoleUser, "hello")}
	for i := range n {
		id := fmt.Sprintf("s-%06d", i)
		if _, err := st.CreateSession(bg, id, Meta{Model: "m", SystemPrompt: "You are a coding agent."}); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Append(bg, id, ev); err != nil {
			b.Fatal(err)
		}
		if err := st.PutRow(id, []byte(`{"messages":1}`)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run(fmt.Sprintf("ListPage100of%d", n), func(b *testing.B) {
		for b.Loop() {
			page, _, err := st.ListPage(bg, "s-000500", 100)
			if err != nil || len(page) != 100 {
				b.Fatal(len(page), err)
			}
		}
	})
	b.Run(fmt.Sprintf("ListSessions%d", n), func(b *testing.B) {
		for b.Loop() {
			ids, err := st.ListSessions(bg)
			if err != nil || len(ids) != n {
				b.Fatal(len(ids), err)
			}
		}
	})
	// /v1/status and every metrics scrape count the sessions:
	// the kept count against the full scan it replaced (a fresh Store's
	// first count), same store, same run.
	b.Run(fmt.Sprintf("CountSessionsKept%d", n), func(b *testing.B) {
		if _, err := st.CountSessions(bg); err != nil { // the one full count
			b.Fatal(err)
		}
		for b.Loop() {
			if c, err := st.CountSessions(bg); err != nil || c != n {
				b.Fatal(c, err)
			}
		}
	})
	b.Run(fmt.Sprintf("CountSessionsScan%d", n), func(b *testing.B) {
		for b.Loop() {
			fresh := Open(st.db, Options{})
			c, err := fresh.CountSessions(bg)
			fresh.Close()
			if err != nil || c != n {
				b.Fatal(c, err)
			}
		}
	})
}
