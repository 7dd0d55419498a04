package history

import (
	"bytes"
	"encoding/json"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"

	"github.com/ctxd/ctxd/internal/corpustest"
)

// o200kPattern is tiktoken-go's o200k_base split pattern, character for
// character, so that regexp2 uses the engine tiktoken-go compiled for it.
const o200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

var o200kRegexp = regexp2.MustCompile(o200kPattern, regexp2.None)

// regexpPieces splits s (valid UTF-8) with the tokenizer's own pattern.
func regexpPieces(t testing.TB, s string) []string {
	var out []string
	m, err := o200kRegexp.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = o200kRegexp.FindNextMatch(m) {
		out = append(out, m.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ourPieces(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		start, e := nextPiece(s, i)
		if start == e {
			break
		}
		out = append(out, s[start:e])
		i = e
	}
	return out
}

// chunkedRawCount is what Estimator.Text returned before the piece cache:
// the tokenizer's own Count of each chunk, summed.
func chunkedRawCount(s string) uint64 {
	var n uint64
	for len(s) > 0 {
		piece := s
		if len(s) > MaxCountBytes {
			piece = s[:cutPoint(s, MaxCountBytes)]
		}
		n += uint64(rawCount(piece))
		s = s[len(piece):]
	}
	return n
}

var splitCases = []string{
	"", "a", "A", "Ab", "ABc", "ABCdEF", "hello world", "  hello", "   \n  x", "\t\tfoo",
	"don't I'LL we've You'Re it'ſ x'", "'s", "a'", "a'l", "a'lL", "éÉ ÀÀÀb", "ǅungla", "ʰʰʰ",
	"x\u0301\u0301y", "\u0301", "\u0301a", " \u0301A", "日本語のテキスト", "123456789", "١٢٣٤",
	"½¼", "a1b2", "foo/bar//baz\n\n", "  ...\n\n/", " (x)", "((", " \n", "\r\n\r\n  ", " \u00a0x",
	"\u3000\u3000a", "x  ", "x \n", "\n", "\n\n\nfoo", "a\r\nb", "?!\r\n/ /", "\"key\": 12345,",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "ÆØÅæøå", "ΑΒΓαβγ", "Straße", "İstanbul", "emoji 🎉🎉 ok", "a\x7fb", "\x7f\x7f", " \x7f", "\x7fA", "(\x7f)\n\x7f\n",
	"ﬁne", "Ǆ", "ᾈᾉ", "x\u200dy", "\u200b", "a\u00adb",
}

// TestPreTokenizerMatchesRegexp compares the written-out split with the
// tokenizer's regexp on hand-picked cases (contractions, marks, title-case
// letters, whitespace runs) and on the corpus's texts.
func TestPreTokenizerMatchesRegexp(t *testing.T) {
	check := func(t *testing.T, s string) {
		t.Helper()
		want, got := regexpPieces(t, s), ourPieces(s)
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("split of %.80q differs at piece %d: got %q, regexp %q", s, i, got[i], want[i])
				}
			}
			t.Fatalf("split of %.80q: got %d pieces, regexp %d", s, len(got), len(want))
		}
	}
	for _, s := range splitCases {
		check(t, s)
	}
	limit := 400 << 10
	if testing.Short() || raceEnabled {
		limit = 40 << 10
	}
	for name, texts := range corpusTexts(t) {
		t.Run(name, func(t *testing.T) {
			n := 0
			for _, s := range texts {
				if n > limit {
					break
				}
				n += len(s)
				check(t, s)
			}
		})
	}
}

// TestCountMatchesTokenizerOnCorpus asserts that every text of every corpus
// file (each JSON string, and the file's bytes) counts exactly as the
// tokenizer's own Count counts it, with the cache cold and warm.
func TestCountMatchesTokenizerOnCorpus(t *testing.T) {
	var e Estimator
	for name, texts := range corpusTexts(t) {
		t.Run(name, func(t *testing.T) {
			if testing.Short() || raceEnabled {
				// Each file's first 128 KiB of texts; all of them without
				// -race or -short.
				n, size := 0, 0
				for n < len(texts) && size < 128<<10 {
					size += len(texts[n])
					n++
				}
				texts = texts[:n]
			}
			var want uint64
			for _, s := range texts {
				want += chunkedRawCount(s)
			}
			for _, pass := range []string{"cold", "warm"} {
				if pass == "cold" {
					resetPieceCache()
				}
				var got uint64
				for _, s := range texts {
					got += e.Text(s)
				}
				if got != want {
					// Find the first text that differs, for the message.
					for _, s := range texts {
						if g, w := e.Text(s), chunkedRawCount(s); g != w {
							t.Fatalf("%s: %.120q counts %d, tokenizer %d", pass, s, g, w)
						}
					}
					t.Fatalf("%s: %d tokens, tokenizer %d", pass, got, want)
				}
			}
			t.Logf("%d texts, %d tokens: identical", len(texts), want)
		})
	}
}

// FuzzPreTokenizer checks the split against the regexp and the count
// against the tokenizer's Count on arbitrary text.
func FuzzPreTokenizer(f *testing.F) {
	for _, s := range splitCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		if got, want := countPieces(s), rawCount(s); got != want {
			t.Fatalf("count of %q: %d, tokenizer %d", s, got, want)
		}
		if !validUTF8(s) {
			return
		}
		want, got := regexpPieces(t, s), ourPieces(s)
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("split of %q: got %q, regexp %q", s, got, want)
		}
	})
}

func validUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// corpusTexts returns, per corpus file (by relative path), its text: each
// JSON string value (and object key) of a JSON or JSON Lines file, in file
// order, then the file's bytes; a Markdown file is one text.
func corpusTexts(tb testing.TB) map[string][]string {
	tb.Helper()
	out := make(map[string][]string)
	for _, rel := range corpustest.Files(tb) {
		data := corpustest.Read(tb, rel)
		var texts []string
		switch {
		case strings.HasSuffix(rel, ".json"):
			var v any
			if json.Unmarshal(data, &v) == nil {
				texts = appendStrings(texts, v)
			}
		case strings.HasSuffix(rel, ".jsonl"):
			for line := range bytes.Lines(data) {
				var v any
				if json.Unmarshal(line, &v) == nil {
					texts = appendStrings(texts, v)
				}
			}
		}
		out[rel] = append(texts, string(data))
	}
	return out
}

func appendStrings(out []string, v any) []string {
	switch v := v.(type) {
	case string:
		if v != "" {
			out = append(out, v)
		}
	case []any:
		for _, x := range v {
			out = appendStrings(out, x)
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			out = append(out, k)
			out = appendStrings(out, v[k])
		}
	}
	return out
}

// TestLongPieceLinear: a piece longer than MaxExactPieceBytes (a run of one
// character, the hostile body of a 30 MiB "xxx…") is counted in sub-pieces
// through the cache: its garbage does not grow with the piece (the
// tokenizer's merge step allocated ~40 bytes per byte of a piece, 2.3 MB per
// 64 KiB chunk), 8 MiB costs no more per byte than 1 MiB, and the count
// stays the tokenizer's within a token per cut.
func TestLongPieceLinear(t *testing.T) {
	alloc := func(s string) uint64 {
		resetPieceCache()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		Estimator{}.Text(s)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	codec() // its tables are not the count's
	small, large := strings.Repeat("x", 1<<20), strings.Repeat("x", 8<<20)
	a1, a8 := alloc(small), alloc(large)
	t.Logf("allocated: 1 MiB run %d bytes, 8 MiB run %d bytes", a1, a8)
	if a8 > uint64(len(large))/4 {
		t.Errorf("counting an 8 MiB run allocated %d bytes (%.1f per byte)", a8, float64(a8)/float64(len(large)))
	}
	if a8 > 10*a1+1<<20 {
		t.Errorf("8 MiB allocated %d bytes, 1 MiB %d: not linear", a8, a1)
	}
	for _, s := range []string{strings.Repeat("x", 5000), strings.Repeat("ab", 3000), strings.Repeat("文", 2000), " " + strings.Repeat("Q", 4000)} {
		got, want := countPieces(s), rawCount(s)
		if d := got - want; d > len(s)/MaxCachedPieceBytes+1 || -d > len(s)/MaxCachedPieceBytes+1 {
			t.Errorf("%.10q… (%d bytes): %d tokens, tokenizer %d", s, len(s), got, want)
		}
	}
	if got, want := countPieces(strings.Repeat("x", 5000)), rawCount(strings.Repeat("x", 5000)); got != want {
		t.Errorf("a run of x: %d tokens, tokenizer %d (its tokens are 8 bytes: cuts at 64 change nothing)", got, want)
	}
}
