package rawjson

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote returns the text of the JSON string v (its quotes included) as
// json.Unmarshal into a string gives it — escapes resolved, a \u escape
// of a surrogate that is not half of a pair and each byte of invalid
// UTF-8 read as U+FFFD — in one pass over v, without the syntax check
// json.Unmarshal runs first: for a value already known to be JSON (a
// member of a message json.Valid accepted), whose large tool output would
// otherwise be read twice more. ok is false when v is not a JSON string
// (a control character, an escape JSON does not have, no closing quote):
// the caller leaves such a value to json.Unmarshal, for its error.
func Unquote(v []byte) (s string, ok bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	v = v[1 : len(v)-1]
	i := plainRun(v, 0)
	if i == len(v) {
		return string(v), true
	}
	out := make([]byte, 0, len(v)+utf8.UTFMax)
	out = append(out, v[:i]...)
	for i < len(v) {
		switch c := v[i]; {
		case c == '\\':
			if i+1 >= len(v) {
				return "", false
			}
			switch e := v[i+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hexEscape(v[i:])
				if !ok {
					return "", false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					// A pair reads as one code point; anything else
					// as U+FFFD, the next escape left to be read on
					// its own.
					if r2, ok := hexEscape(v[i:]); ok {
						if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
							out = utf8.AppendRune(out, d)
							i += 6
							continue
						}
					}
					r = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, r)
				continue
			default:
				return "", false
			}
			i += 2
		case c == '"' || c < ' ':
			return "", false
		case c < utf8.RuneSelf:
			j := plainRun(v, i)
			if j == i {
				j = i + 1
			}
			out = append(out, v[i:j]...)
			i = j
		default:
			// Invalid UTF-8: each byte of it is U+FFFD.
			r, n := utf8.DecodeRune(v[i:])
			out = utf8.AppendRune(out, r)
			i += n
		}
	}
	return string(out), true
}

// plainRun returns the end of the run of v from i that needs no
// decoding: valid UTF-8 without quotes, backslashes or control
// characters.
func plainRun(v []byte, i int) int {
	for i < len(v) {
		c := v[i]
		if c < utf8.RuneSelf {
			if c < ' ' || c == '"' || c == '\\' {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(v[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return i
}

// hexEscape reads the escape \uXXXX at the start of b.
func hexEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
