package history

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchMessages is a tool round of realistic size: an assistant message
// with text and a tool call, and a 16 KiB tool result.
func benchMessages() []Message {
	prose := proseMB()
	return []Message{
		{Role: RoleAssistant, Content: []Block{
			{Type: BlockText, Text: prose[:600]},
			{Type: BlockToolCall, ID: "toolu_01", Name: "Read", Input: json.RawMessage(`{"file_path":"/src/main.go","limit":400}`)},
		}},
		{Role: RoleTool, ToolCallID: "toolu_01", ToolName: "Read", Content: []Block{{Type: BlockText, Text: prose[:16<<10]}}},
	}
}

// messageTexts is every text Estimator.Message counts in ms, joined: what
// one raw tokenizer Count over the same content sees.
func messageTexts(ms []Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.ToolCallID)
		b.WriteString(m.ToolName)
		for _, blk := range m.Content {
			b.WriteString(blk.Text)
			b.WriteString(blk.ID)
			b.WriteString(blk.Name)
			b.Write(blk.Input)
			b.Write(blk.JSON)
		}
	}
	return b.String()
}

// BenchmarkEstimateVsRawCount compares the Estimator's Message cost (chunked
// counting per text plus overheads) with the tokenizer's raw Count on the
// same text in one call: the estimator's bookkeeping should cost little
// beside the tokenizer itself.
func BenchmarkEstimateVsRawCount(b *testing.B) {
	codec() // built outside the timer
	ms := benchMessages()
	s := messageTexts(ms)
	b.Run("Estimator.Message", func(b *testing.B) {
		var e Estimator
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			for _, m := range ms {
				e.Message(m)
			}
		}
	})
	b.Run("RawCount", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			if _, err := codec().Count(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCountCorpus counts every text of the corpus (each JSON string of
// every file, as corpusTexts gives them; the goal in docs/performance.md: ≥ 20
// MB/s per core with identical counts) three ways in the same run: the
// Estimator with the piece cache warm (a running daemon's steady state), with
// the cache emptied before each pass (its worst case: nothing seen before), and
// the tokenizer's own Count. Each checks that its total is the tokenizer's.
// MB/s is per core (the benchmark is one goroutine). The whole corpus (6.6 MB
// of text) with CTXD_BENCH_FULL=1; else its first MiB, so that CI's -benchtime
// 1x pass stays quick.
func BenchmarkCountCorpus(b *testing.B) {
	codec()
	limit := int64(1 << 20)
	if os.Getenv("CTXD_BENCH_FULL") == "1" {
		limit = math.MaxInt64
	}
	byFile := corpusTexts(b)
	var texts []string
	var size int64
	for _, name := range slices.Sorted(maps.Keys(byFile)) {
		ts := byFile[name]
		for _, s := range ts[:len(ts)-1] { // the strings, not the raw file
			if size >= limit {
				break
			}
			texts = append(texts, s)
			size += int64(len(s))
		}
	}
	var want uint64
	for _, s := range texts {
		want += chunkedRawCount(s)
	}
	var e Estimator
	run := func(b *testing.B, reset bool, count func(string) uint64) {
		b.SetBytes(size)
		cpu0 := processCPU()
		for b.Loop() {
			if reset {
				resetPieceCache()
			}
			var got uint64
			for _, s := range texts {
				got += count(s)
			}
			if got != want {
				b.Fatalf("counted %d tokens, the tokenizer %d", got, want)
			}
		}
		b.ReportMetric(float64(want), "tokens")
		// MB per second of CPU time: what one core does, however much of
		// it a shared machine gave the benchmark (run with -cpu 1).
		if cpu := processCPU() - cpu0; cpu > 0 {
			b.ReportMetric(float64(size)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
		}
	}
	b.Run("Estimator.Text/warm", func(b *testing.B) {
		for _, s := range texts { // warm the cache outside the timer
			e.Text(s)
		}
		run(b, false, e.Text)
	})
	b.Run("Estimator.Text/cold", func(b *testing.B) { run(b, true, e.Text) })
	b.Run("TokenizerCount", func(b *testing.B) { run(b, false, chunkedRawCount) })
}

// processCPU is the CPU time (user + system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCountStubCold counts 5,000 bytes of corpus text (the size of
// an offload stub's head and tail) at a different place each time, the
// piece cache warm but the CPU's caches emptied between counts (4 MiB
// written, outside the timer): as the proxy counts a new result's stub
// between requests of ~1 MB, where the cache's memory is no longer in
// the CPU's caches.
func BenchmarkCountStubCold(b *testing.B) {
	codec()
	var all []byte
	byFile := corpusTexts(b)
	for _, name := range slices.Sorted(maps.Keys(byFile)) {
		ts := byFile[name]
		for _, s := range ts[:len(ts)-1] {
			all = append(all, s...)
		}
		if len(all) > 2<<20 {
			break
		}
	}
	s := string(all)
	var e Estimator
	e.Text(s)
	junk := make([]byte, 4<<20)
	i := 0
	for b.Loop() {
		b.StopTimer()
		for k := range junk {
			junk[k]++
		}
		b.StartTimer()
		at := (i * 7919) % (len(s) - 6000)
		e.Text(s[at : at+5000])
		i++
	}
}
