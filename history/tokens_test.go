package history

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog.\nIt was 2026; 中文文本 too. ", 400)
	tests := []struct {
		name string
		s    string
		want uint64 // 0: compare chunked with unchunked within tolerance only
	}{
		{"empty", "", 0},
		{"hello world", "hello world", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Estimator{}).Text(tt.s); got != tt.want {
				t.Fatalf("Text(%q) = %d, want %d", tt.s, got, tt.want)
			}
		})
	}

	// Chunking at word and line boundaries gives the same count as one call;
	// inside a run, about one token per chunk more or less.
	chunked := []struct {
		name      string
		s         string
		tolerance uint64
	}{
		{"prose", prose, 0},
		{"run of one letter", strings.Repeat("a", 20_000), 20_000/512 + 1},
		{"run of CJK", strings.Repeat("文", 5_000), 15_000/512 + 1},
	}
	for _, tt := range chunked {
		t.Run("chunked "+tt.name, func(t *testing.T) {
			whole, err := codec().Count(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			got := Estimator{ChunkBytes: 512}.Text(tt.s)
			if d := int64(got) - int64(whole); d > int64(tt.tolerance) || -d > int64(tt.tolerance) {
				t.Fatalf("chunked = %d, whole = %d, tolerance %d", got, whole, tt.tolerance)
			}
		})
	}
}

func TestCutPoint(t *testing.T) {
	tests := []struct {
		name  string
		s     string
		limit int
		want  int
	}{
		{"before a word", "aaaa bbbb cccc", 12, 9},
		{"after a newline", "aaaaaa\nbbbbbbbbb", 12, 7},
		{"run: code point boundary", strings.Repeat("é", 10), 9, 8},
		{"no boundary in second half", "a bbbbbbbbbbbbbbbbb", 12, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cutPoint(tt.s, tt.limit)
			if got != tt.want {
				t.Fatalf("cutPoint = %d, want %d", got, tt.want)
			}
			if !utf8.ValidString(tt.s[:got]) {
				t.Fatal("cut inside a code point")
			}
		})
	}
}

func TestMessageTokens(t *testing.T) {
	var e Estimator
	tests := []struct {
		name string
		m    Message
		want uint64
	}{
		{"empty", Message{Role: RoleUser}, MessageOverheadTokens},
		{"text", text(RoleUser, "hello world"), MessageOverheadTokens + BlockOverheadTokens + 2},
		{"thinking, signature not counted", Message{Role: RoleAssistant, Content: []Block{{Type: BlockThinking, Text: "hello world", Signature: strings.Repeat("x", 500)}}}, MessageOverheadTokens + BlockOverheadTokens + 2},
		{"tool call", calls(Block{Type: BlockToolCall, ID: "a", Name: "bash", Input: json.RawMessage(`{}`)}), MessageOverheadTokens + BlockOverheadTokens + ToolCallOverheadTokens + e.Text("a") + e.Text("bash") + e.Text("{}")},
		{"tool result", Message{Role: RoleTool, ToolCallID: "a", ToolName: "bash", Content: []Block{{Type: BlockJSON, JSON: json.RawMessage(`[1]`)}}}, MessageOverheadTokens + ToolResultOverheadTokens + e.Text("a") + e.Text("bash") + BlockOverheadTokens + e.Text("[1]")},
		{"image", Message{Role: RoleUser, Content: []Block{{Type: BlockImage, MediaType: "image/png", Artifact: "artifact://x"}}}, MessageOverheadTokens + BlockOverheadTokens + ImageTokens},
		{"redacted", Message{Role: RoleAssistant, Content: []Block{{Type: BlockRedactedThinking, Data: strings.Repeat("A", 1600)}}}, MessageOverheadTokens + BlockOverheadTokens + 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := e.Message(tt.m); got != tt.want {
				t.Fatalf("Message = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestFillCountsOnce(t *testing.T) {
	m := text(RoleUser, "hello world")
	n := Estimator{}.Fill(&m)
	if n == 0 || m.Tokens != n {
		t.Fatalf("Fill = %d, Tokens = %d", n, m.Tokens)
	}
	m.Content[0].Text = strings.Repeat("changed ", 100)
	if got := (Estimator{}).Fill(&m); got != n {
		t.Fatalf("Fill recounted: %d, want %d", got, n)
	}
}

func TestEstimatorConcurrent(t *testing.T) {
	s := strings.Repeat("concurrent counting of shared codec ", 200)
	want := Estimator{}.Text(s)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := (Estimator{ChunkBytes: 1000}).Text(s); got != want {
				t.Errorf("Text = %d, want %d", got, want)
			}
		})
	}
	wg.Wait()
}

func TestCalibrator(t *testing.T) {
	tests := []struct {
		name     string
		samples  [][2]uint64 // reported, estimated
		accepted []bool
		want     float64
	}{
		{"no samples: initial", nil, nil, 1.35},
		{"one sample moves alpha of the way", [][2]uint64{{15000, 10000}}, []bool{true}, 1.35 + CalibrationAlpha*(1.5-1.35)},
		{"converges", repeat([2]uint64{12000, 10000}, 40), nil, 1.2},
		{"ignored samples", [][2]uint64{{100, 10}, {0, 10000}, {100000, 1000}, {100, 10000}}, []bool{false, false, false, false}, 1.35},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCalibrator(1.35)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.samples {
				ok := c.Observe(s[0], s[1])
				if tt.accepted != nil && ok != tt.accepted[i] {
					t.Errorf("Observe(%d, %d) = %v", s[0], s[1], ok)
				}
			}
			if got := c.Factor(); math.Abs(got-tt.want) > 1e-3 {
				t.Fatalf("Factor = %v, want %v", got, tt.want)
			}
		})
	}
}

func repeat(s [2]uint64, n int) [][2]uint64 {
	out := make([][2]uint64, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestCalibratorApply(t *testing.T) {
	c, _ := NewCalibrator(1.35)
	tests := []struct {
		est, want uint64
	}{
		{0, 0},
		{100, 135},
		{1, 2}, // rounded up
		{math.MaxUint64, math.MaxUint64},
	}
	for _, tt := range tests {
		if got := c.Apply(tt.est); got != tt.want {
			t.Errorf("Apply(%d) = %d, want %d", tt.est, got, tt.want)
		}
	}
}

func TestCalibratorSaveRestore(t *testing.T) {
	c, _ := NewCalibrator(1.35)
	c.Observe(14000, 10000)
	c.Observe(14500, 10000)
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var r Calibrator
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.State() != c.State() || r.Samples() != 2 {
		t.Fatalf("restored %+v, want %+v", r.State(), c.State())
	}

	bad := []struct {
		name, in string
		factor   bool
	}{
		{"factor too big", `{"initial":1.35,"factor":9,"samples":1}`, true},
		{"initial zero", `{"initial":0,"factor":1,"samples":0}`, true},
		{"unknown field", `{"initial":1,"factor":1,"samples":0,"alpha":1}`, false},
		{"trailing", `{"initial":1,"factor":1,"samples":0} 1`, false},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			var r Calibrator
			err := json.Unmarshal([]byte(tt.in), &r)
			if err == nil || errors.Is(err, ErrFactor) != tt.factor {
				t.Fatalf("UnmarshalJSON = %v", err)
			}
		})
	}
	for _, f := range []float64{0, -1, math.NaN(), math.Inf(1), 5} {
		if _, err := NewCalibrator(f); !errors.Is(err, ErrFactor) {
			t.Errorf("NewCalibrator(%v) = %v, want ErrFactor", f, err)
		}
	}
}

func TestCalibratorConcurrent(t *testing.T) {
	c, _ := NewCalibrator(1.35)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Observe(13000, 10000)
				_ = c.Apply(1000)
				_, _ = c.MarshalJSON()
			}
		})
	}
	wg.Wait()
	if c.Samples() != 400 {
		t.Fatalf("Samples = %d", c.Samples())
	}
}

// Linearity: BenchmarkCountRun1MB's ns/op is about 10× BenchmarkCountRun100KB's.
func BenchmarkCountRun100KB(b *testing.B) { benchRun(b, strings.Repeat("a", 100<<10)) }

// BenchmarkCountRun1MB counts a 1 MB run of one character.
func BenchmarkCountRun1MB(b *testing.B) { benchRun(b, strings.Repeat("a", 1<<20)) }

// BenchmarkCountText1MB counts 1 MB of ordinary prose through the Estimator.
func BenchmarkCountText1MB(b *testing.B) { benchRun(b, proseMB()) }

// BenchmarkRawCountText64KB is the baseline: the tokenizer's own Count on
// 64 KiB of ordinary prose, one call (bytes/s comparable with the above).
func BenchmarkRawCountText64KB(b *testing.B) {
	s := proseMB()[:64<<10]
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if _, err := codec().Count(s); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRun(b *testing.B, s string) {
	var e Estimator
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		e.Text(s)
	}
}

func proseMB() string {
	const para = "The daemon keeps every session inside the model's context window. " +
		"It offloads oversized tool results, edits old ones into stubs, and compacts as a backstop.\n" +
		"func main() { fmt.Println(\"hello, 世界\", 42, x[i] != nil) }\n"
	return strings.Repeat(para, (1<<20)/len(para)+1)[:1<<20]
}
