package rawjson

import "encoding/binary"

// Valid reports whether b is one JSON value, as encoding/json's Valid
// does: the same grammar, the same nesting bound (10,000), any byte at
// or above 0x20 in a string (UTF-8 is not checked). It reads strings by
// their runs of plain bytes, where encoding/json's scanner steps through
// a state function per byte: a new message of tens of KB is checked
// several times faster.
func Valid(b []byte) bool {
	// stack holds, per open value, '{' or '['; the top's need says what
	// comes next.
	var stack []byte
	i := SkipSpace(b, 0)
	for {
		// A value at b[i].
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{':
			if len(stack) >= maxNestingDepth {
				return false
			}
			stack = append(stack, '{')
			i = SkipSpace(b, i+1)
			if i < len(b) && b[i] == '}' {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if i = validKey(b, i); i < 0 {
				return false
			}
			continue
		case c == '[':
			if len(stack) >= maxNestingDepth {
				return false
			}
			stack = append(stack, '[')
			i = SkipSpace(b, i+1)
			if i < len(b) && b[i] == ']' {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			continue
		case c == '"':
			if i = stringEnd(b, i); i < 0 {
				return false
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if i = numberEnd(b, i); i < 0 {
				return false
			}
		case c == 't':
			if !literal(b, i, "true") {
				return false
			}
			i += 4
		case c == 'f':
			if !literal(b, i, "false") {
				return false
			}
			i += 5
		case c == 'n':
			if !literal(b, i, "null") {
				return false
			}
			i += 4
		default:
			return false
		}
		// After a value: close what it ends, or go on to the next.
		for {
			i = SkipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if b[i] == ',' {
				i = SkipSpace(b, i+1)
				if top == '{' {
					if i = validKey(b, i); i < 0 {
						return false
					}
				}
				break
			}
			if (top == '{' && b[i] != '}') || (top == '[' && b[i] != ']') {
				return false
			}
			stack = stack[:len(stack)-1]
			i++
		}
	}
}

// maxNestingDepth is encoding/json's bound on nested objects and arrays.
const maxNestingDepth = 10000

// validKey reads an object's key and its colon at b[i] and returns the offset
// of the value after them (white space skipped), or -1.
func validKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = stringEnd(b, i); i < 0 {
		return -1
	}
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return SkipSpace(b, i+1)
}

// stringEnd is the offset past the valid JSON string at b[i] (a quote),
// or -1: no byte under 0x20, escapes of encoding/json's grammar only.
func stringEnd(b []byte, i int) int {
	i++
	for i < len(b) {
		// Eight plain bytes at a time: none a quote, a backslash or
		// under 0x20.
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			i++
		}
	}
	return -1
}

// special reports whether one of the eight bytes of w is a quote, a
// backslash or under 0x20 (the bit tricks of "Bit Twiddling Hacks":
// a zero byte of w^pattern, a byte of w less than 0x20).
func special(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(x uint64) uint64 { return (x - ones) &^ x & highs }
	return (zero(w^(ones*'"')) | zero(w^(ones*'\\')) | ((w - ones*0x20) &^ w & highs)) != 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// numberEnd is the offset past the JSON number at b[i], or -1.
func numberEnd(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func literal(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}
