package history

import (
	"unicode"
	"unicode/utf8"
)

// The o200k_base pre-tokenizer, written out. o200k's byte-pair encoding
// works within each piece its split pattern cuts the text into, so a text's
// token count is the sum of its pieces' counts, and a piece's count can be
// remembered (countcache.go). The pattern, as tiktoken-go compiles it (with
// github.com/dlclark/regexp2, .NET semantics: leftmost alternative that
// matches, greedy loops that backtrack):
//
//	A1 [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	A2 [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	A3 \p{N}{1,3}
//	A4  ?[^\s\p{L}\p{N}]+[\r\n/]*
//	A5 \s*[\r\n]+
//	A6 \s+(?!\S)
//	A7 \s+
//
// \s is unicode.IsSpace, as in regexp2. splitPiece reproduces the match
// at one position, including the backtracking of A1's two loops and of
// A6's whitespace run, and A5 as regexp2's code generator compiled it: its
// \s* backtracks to the FIRST line end of the whitespace run, not the last
// (so "\n  \n" is two pieces, where OpenAI's tiktoken has one); the counts
// must be tiktoken-go's. TestPreTokenizerMatchesRegexp and FuzzPreTokenizer
// compare splitPiece with the regexp itself.

// Character classes of one rune, as bits.
const (
	clsLetter = 1 << iota // \p{L}
	clsNumber             // \p{N}
	clsSpace              // \s
	clsUpper              // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clsLower              // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	clsPrefix             // [^\r\n\p{L}\p{N}]
	clsOther              // [^\s\p{L}\p{N}]
)

// asciiClass holds the classes of the 128 ASCII runes.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = classOfSlow(r)
	}
	// regexp2's compiled ASCII bitmaps leave DEL out of both sets it
	// belongs to, so no alternative matches it and the tokenizer skips it:
	// it counts no tokens.
	t[utf8.RuneSelf-1] &^= clsPrefix | clsOther
	return t
}()

func classOfSlow(r rune) uint8 {
	var c uint8
	letter := unicode.IsLetter(r)
	number := unicode.IsNumber(r)
	space := unicode.IsSpace(r)
	if letter {
		c |= clsLetter
	}
	if number {
		c |= clsNumber
	}
	if space {
		c |= clsSpace
	}
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsUpper
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsLower
	}
	if r != '\r' && r != '\n' && !letter && !number {
		c |= clsPrefix
	}
	if !space && !letter && !number {
		c |= clsOther
	}
	return c
}

// runeAt returns the rune starting at s[i], its size in bytes and its
// classes. s must be valid UTF-8 and i < len(s).
func runeAt(s string, i int) (rune, int, uint8) {
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), 1, asciiClass[b]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, n, classOfSlow(r)
}

// runOf returns the end of the run of runes in class cls starting at i.
func runOf(s string, i int, cls uint8) int {
	for i < len(s) {
		_, n, c := runeAt(s, i)
		if c&cls == 0 {
			break
		}
		i += n
	}
	return i
}

// nextPiece returns the bounds of the piece at or after s[i], in bytes:
// start > i where DEL bytes, which the tokenizer skips, come first; start ==
// end == len(s) when only those are left. s must be valid UTF-8.
func nextPiece(s string, i int) (start, end int) {
	for i < len(s) && s[i] == utf8.RuneSelf-1 {
		i++
	}
	if i == len(s) {
		return i, i
	}
	return i, splitPiece(s, i)
}

// splitPiece returns the end of the piece that starts at s[i] (i < len(s),
// s[i] not DEL), in bytes. s must be valid UTF-8. Every other rune belongs
// to some alternative, so a piece is never empty.
func splitPiece(s string, i int) int {
	_, n0, c0 := runeAt(s, i)
	// A1 and A2 need a letter (or mark) after an optional prefix.
	if c0&(clsPrefix|clsUpper|clsLower) != 0 {
		if c0&clsPrefix != 0 {
			if e, ok := matchA1(s, i+n0); ok {
				return e
			}
		}
		if e, ok := matchA1(s, i); ok {
			return e
		}
		if c0&clsPrefix != 0 {
			if e := runOf(s, i+n0, clsUpper); e > i+n0 {
				return contraction(s, runOf(s, e, clsLower))
			}
		}
		if e := runOf(s, i, clsUpper); e > i {
			return contraction(s, runOf(s, e, clsLower))
		}
	}
	// A3: one to three numbers.
	if c0&clsNumber != 0 {
		e := i
		for k := 0; k < 3 && e < len(s); k++ {
			_, n, c := runeAt(s, e)
			if c&clsNumber == 0 {
				break
			}
			e += n
		}
		return e
	}
	// A4: an optional space, other characters, then line ends and slashes.
	if s[i] == ' ' && i+1 < len(s) {
		if _, _, c1 := runeAt(s, i+1); c1&clsOther != 0 {
			return lineEndsAndSlashes(s, runOf(s, i+1, clsOther))
		}
	}
	if c0&clsOther != 0 {
		return lineEndsAndSlashes(s, runOf(s, i, clsOther))
	}
	// A5–A7: whitespace (the only class left).
	w, nl, lastStart := i, -1, i
	for w < len(s) {
		r, n, c := runeAt(s, w)
		if c&clsSpace == 0 {
			break
		}
		if nl < 0 && (r == '\r' || r == '\n') {
			nl = w
		}
		lastStart = w
		w += n
	}
	switch {
	case nl >= 0: // A5, as compiled: up to the end of the first line ends
		for nl < len(s) && (s[nl] == '\r' || s[nl] == '\n') {
			nl++
		}
		return nl
	case w == len(s): // A6 at the end of the text
		return w
	case lastStart > i: // A6: all but the last whitespace rune
		return lastStart
	}
	return w // A7: one whitespace rune before a non-space
}

// matchA1 matches U*L+ from j (A1 after its optional prefix): the greedy U
// run, then an L run where it ends; failing that, backtracking the U run to
// its last rune that is also L, which then forms L+ alone. ok is false when
// no L rune is reachable.
func matchA1(s string, j int) (end int, ok bool) {
	lastL := -1 // end of the last rune of the U run that is also L
	p := j
	for p < len(s) {
		_, n, c := runeAt(s, p)
		if c&clsUpper == 0 {
			break
		}
		p += n
		if c&clsLower != 0 {
			lastL = p
		}
	}
	if p < len(s) {
		if _, _, c := runeAt(s, p); c&clsLower != 0 {
			return contraction(s, runOf(s, p, clsLower)), true
		}
	}
	if lastL >= 0 {
		return contraction(s, lastL), true
	}
	return 0, false
}

// contraction extends a letter piece ending at e by an English contraction
// ('s 't 're 've 'm 'll 'd, any case, and 'ſ as the compiled pattern has
// it) when one follows.
func contraction(s string, e int) int {
	if e+1 >= len(s) || s[e] != '\'' {
		return e
	}
	switch s[e+1] {
	case 'S', 'T', 's', 't', 'M', 'm', 'D', 'd':
		return e + 2
	case 'R', 'r', 'V', 'v':
		if e+2 < len(s) && s[e+2]|0x20 == 'e' {
			return e + 3
		}
	case 'L', 'l':
		if e+2 < len(s) && s[e+2]|0x20 == 'l' {
			return e + 3
		}
	case 0xC5: // ſ is C5 BF
		if e+2 < len(s) && s[e+2] == 0xBF {
			return e + 3
		}
	}
	return e
}

// lineEndsAndSlashes extends an A4 piece ending at e by [\r\n/]*.
func lineEndsAndSlashes(s string, e int) int {
	for e < len(s) && (s[e] == '\r' || s[e] == '\n' || s[e] == '/') {
		e++
	}
	return e
}
