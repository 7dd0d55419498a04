package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The byte-level scanner and splicer: what the proxy and the wire packages
// use to read a provider request in one pass and to change one member of
// it while every other byte stays as the client wrote it. They follow the
// syntax only as far as they need to find values' ends; a body that is
// valid to them but not JSON is the provider's to refuse.

// IsSpace reports whether c is JSON white space.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the offset of the first byte at or after i that is
// not white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && IsSpace(b[i]) {
		i++
	}
	return i
}

// StringEnd returns the offset just past the JSON string starting at i.
// It jumps from quote to quote (bytes.IndexByte, vectorized): a quote
// preceded by an odd run of backslashes is escaped.
func StringEnd(b []byte, i int) int {
	j := i + 1
	for j < len(b) {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		q := j + k
		bs := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// ValueEnd returns the offset just past the JSON value starting at i.
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = StringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !IsSpace(b[j]) {
			j++
		}
		return j
	}
}

// SplitArray splits a JSON array into its raw elements (sub-slices of a).
func SplitArray(a []byte) ([]json.RawMessage, error) {
	out, _, err := ScanArray(a, 0)
	return out, err
}

// ScanArray splits the JSON array starting at b[start] into its raw
// elements (sub-slices of b) and returns the offset just past it. Byte
// offsets in its errors are from start.
func ScanArray(b []byte, start int) ([]json.RawMessage, int, error) {
	out, end, _, err := scanArray(b, start, false)
	return out, end, err
}

// ScanArrayBlocks is ScanArray with, in the same pass, the sum of
// Blocks over the elements: the proxy's count of a conversation's
// content blocks (proxy.limits.content_blocks), without walking the
// conversation a second time.
func ScanArrayBlocks(b []byte, start int) ([]json.RawMessage, int, uint64, error) {
	return scanArray(b, start, true)
}

func scanArray(b []byte, start int, count bool) ([]json.RawMessage, int, uint64, error) {
	a := b[start:]
	if len(a) == 0 || a[0] != '[' {
		return nil, 0, 0, fmt.Errorf("not an array")
	}
	var out []json.RawMessage
	var blocks uint64
	i := SkipSpace(a, 1)
	if i < len(a) && a[i] == ']' {
		return out, start + i + 1, 0, nil
	}
	for i < len(a) {
		var end, n int
		walked := false
		if count {
			end, n, walked = objectBlocks(a, i)
		}
		if !walked {
			end = ValueEnd(a, i)
		}
		if end <= i {
			return nil, 0, 0, fmt.Errorf("element %d: no value at byte %d", len(out), i)
		}
		elem := json.RawMessage(a[i:end:end])
		out = append(out, elem)
		i = SkipSpace(a, end)
		if i >= len(a) || (a[i] != ',' && a[i] != ']') {
			return nil, 0, 0, fmt.Errorf("element %d: expected ',' or ']' at byte %d", len(out), i)
		}
		switch {
		case walked:
			blocks += uint64(n)
		case count:
			// Counted once the element is known whole.
			blocks += Blocks(elem)
		}
		if a[i] == ',' {
			i = SkipSpace(a, i+1)
			continue
		}
		return out, start + i + 1, blocks, nil
	}
	return nil, 0, 0, fmt.Errorf("unterminated array")
}

// Blocks is the proxy's count of the content blocks of m, a
// conversation's element (proxy.limits.content_blocks): the elements of
// its first "content" member when that is an array, else 1 (a message
// whose content is a string, a Responses item without content).
func Blocks(m []byte) uint64 {
	var content []byte
	Members(m, func(key string, vs, ve int) bool {
		if key == "content" {
			content = m[vs:ve]
			return false
		}
		return true
	})
	if len(content) > 0 && content[0] == '[' {
		return uint64(CountElems(content))
	}
	return 1
}

// objectBlocks reads the object at b[i] by its members, as ValueEnd
// would walk it, and returns its end and Blocks of it, in one pass; ok
// false when the object is not one this walk follows exactly as
// ValueEnd and Blocks do (an escaped key, a bare value holding a
// bracket or a quote, a syntax it does not expect): the caller uses
// those then.
func objectBlocks(b []byte, i int) (end, blocks int, ok bool) {
	if b[i] != '{' {
		return 0, 0, false
	}
	j := SkipSpace(b, i+1)
	if j < len(b) && b[j] == '}' {
		return j + 1, 1, true
	}
	blocks, found := 1, false
	for j < len(b) && b[j] == '"' {
		kEnd := StringEnd(b, j)
		if kEnd >= len(b) {
			return 0, 0, false
		}
		key := b[j+1 : kEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return 0, 0, false
		}
		j = SkipSpace(b, kEnd)
		if j >= len(b) || b[j] != ':' {
			return 0, 0, false
		}
		vs := SkipSpace(b, j+1)
		if vs >= len(b) {
			return 0, 0, false
		}
		var ve int
		if !found && string(key) == "content" {
			found = true
			if b[vs] == '[' {
				if ve, blocks, ok = arrayElems(b, vs); !ok {
					return 0, 0, false
				}
			} else if ve, ok = plainValueEnd(b, vs); !ok {
				return 0, 0, false
			}
		} else if ve, ok = plainValueEnd(b, vs); !ok {
			return 0, 0, false
		}
		j = SkipSpace(b, ve)
		if j < len(b) && b[j] == ',' {
			j = SkipSpace(b, j+1)
			continue
		}
		if j < len(b) && b[j] == '}' {
			return j + 1, blocks, true
		}
		return 0, 0, false
	}
	return 0, 0, false
}

// arrayElems is the end of the array at b[i] and its elements' count,
// as ValueEnd and CountElems find them; ok false where they could
// differ (plainValueEnd) or the array is not well formed.
func arrayElems(b []byte, i int) (end, n int, ok bool) {
	j := SkipSpace(b, i+1)
	if j < len(b) && b[j] == ']' {
		return j + 1, 0, true
	}
	for j < len(b) {
		e, ok := plainValueEnd(b, j)
		if !ok {
			return 0, 0, false
		}
		n++
		j = SkipSpace(b, e)
		if j < len(b) && b[j] == ',' {
			j = SkipSpace(b, j+1)
			continue
		}
		if j < len(b) && b[j] == ']' {
			return j + 1, n, true
		}
		return 0, 0, false
	}
	return 0, 0, false
}

// plainValueEnd is ValueEnd(b, i), ok false when a walk of the
// enclosing value by depth (ValueEnd's) could end elsewhere than a walk
// by members: no value, an unterminated one, or a bare value (a number,
// true) holding a bracket or a quote, which ValueEnd's depth counts and
// its bare-value scan does not.
func plainValueEnd(b []byte, i int) (int, bool) {
	e := ValueEnd(b, i)
	if e <= i || e > len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		// An unterminated string ends the input: the caller's next
		// byte is missing, and it gives up.
	case '{', '[':
		if c := b[e-1]; c != '}' && c != ']' {
			return 0, false
		}
	default:
		if bytes.ContainsAny(b[i:e], "{[\"") {
			return 0, false
		}
	}
	return e, true
}

// Members calls fn for each member of the JSON object o (its key, decoded
// only when it holds an escape, and its value's byte range), until fn
// returns false. It reports whether o is an object it could follow.
func Members(o []byte, fn func(key string, vs, ve int) bool) bool {
	return MembersAt(o, func(key string, _, vs, ve int) bool { return fn(key, vs, ve) })
}

// MembersAt is Members, with the offset ks of each member's key too.
func MembersAt(o []byte, fn func(key string, ks, vs, ve int) bool) bool {
	i := SkipSpace(o, 0)
	if i >= len(o) || o[i] != '{' {
		return false
	}
	i = SkipSpace(o, i+1)
	if i < len(o) && o[i] == '}' {
		return true
	}
	for i < len(o) && o[i] == '"' {
		kEnd := StringEnd(o, i)
		key := string(o[i+1 : kEnd-1])
		if strings.IndexByte(key, '\\') >= 0 && json.Unmarshal(o[i:kEnd], &key) != nil {
			return false
		}
		j := SkipSpace(o, kEnd)
		if j >= len(o) || o[j] != ':' {
			return false
		}
		vs := SkipSpace(o, j+1)
		ve := ValueEnd(o, vs)
		if ve <= vs || ve > len(o) {
			return false
		}
		if !fn(key, i, vs, ve) {
			return true
		}
		i = SkipSpace(o, ve)
		if i < len(o) && o[i] == ',' {
			i = SkipSpace(o, i+1)
			continue
		}
		return i < len(o) && o[i] == '}'
	}
	return false
}

// MemberRange finds a top-level member of the JSON object body: the byte
// range of its value.
func MemberRange(body []byte, key string) (start, end int, ok bool) {
	i := SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return 0, 0, false
	}
	i = SkipSpace(body, i+1)
	for i < len(body) && body[i] == '"' {
		kEnd := StringEnd(body, i)
		if kEnd <= i || kEnd > len(body) {
			return 0, 0, false
		}
		var k string
		if json.Unmarshal(body[i:kEnd], &k) != nil {
			return 0, 0, false
		}
		i = SkipSpace(body, kEnd)
		if i >= len(body) || body[i] != ':' {
			return 0, 0, false
		}
		vStart := SkipSpace(body, i+1)
		vEnd := ValueEnd(body, vStart)
		if vEnd <= vStart || vEnd > len(body) {
			return 0, 0, false
		}
		if k == key {
			return vStart, vEnd, true
		}
		i = SkipSpace(body, vEnd)
		if i < len(body) && body[i] == ',' {
			i = SkipSpace(body, i+1)
		}
	}
	return 0, 0, false
}

// WithMember inserts member ("key":value) as the body's first member; the
// client's members keep their bytes.
func WithMember(body []byte, member string) []byte {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body
	}
	sep := ","
	if rest := bytes.TrimSpace(body[i+1:]); len(rest) > 0 && rest[0] == '}' {
		sep = ""
	}
	out := make([]byte, 0, len(body)+len(member)+1)
	out = append(out, body[:i+1]...)
	out = append(out, member...)
	out = append(out, sep...)
	return append(out, body[i+1:]...)
}

// Splice returns a copy of body with the bytes [start, end) replaced by v.
func Splice(body []byte, start, end int, v []byte) []byte {
	out := make([]byte, 0, len(body)-(end-start)+len(v))
	out = append(out, body[:start]...)
	out = append(out, v...)
	return append(out, body[end:]...)
}

// BareText returns the string literal S of the content array a when it
// holds one block {"type":T,"text":S} and nothing else, T one of types
// (each a JSON string's bytes, quotes included); nil otherwise. Only bytes
// are compared: nothing is decoded.
func BareText(a []byte, types ...[]byte) []byte {
	elems, err := SplitArray(a)
	if err != nil || len(elems) != 1 {
		return nil
	}
	var text []byte
	typed := false
	ok := Members(elems[0], func(key string, vs, ve int) bool {
		v := elems[0][vs:ve]
		switch key {
		case "type":
			for _, t := range types {
				typed = typed || bytes.Equal(v, t)
			}
			if !typed {
				text = nil
				return false
			}
		case "text":
			if v[0] != '"' {
				text = nil
				return false
			}
			text = v
		default:
			text = nil
			return false
		}
		return true
	})
	if !ok || !typed {
		return nil
	}
	return text
}

// CountElems counts the elements of the JSON array a (already scanned by
// ScanArray, so well formed to the scanner), without allocating; it stops
// at the first element it cannot follow.
func CountElems(a []byte) int {
	i := SkipSpace(a, 1)
	if i >= len(a) || a[i] == ']' {
		return 0
	}
	n := 0
	for i < len(a) {
		e := ValueEnd(a, i)
		if e <= i {
			return n
		}
		n++
		i = SkipSpace(a, e)
		if i >= len(a) || a[i] != ',' {
			return n
		}
		i = SkipSpace(a, i+1)
	}
	return n
}

// SkipSpaceBack returns the end of b without its trailing white space.
func SkipSpaceBack(b []byte) int {
	i := len(b)
	for i > 0 && IsSpace(b[i-1]) {
		i--
	}
	return i
}

// Compact is v, a JSON value, without the white space between its
// tokens: v itself when it has none (one pass, no copy), else a compacted
// copy (encoding/json's Compact; v as it is when that fails). Text
// inside strings is never touched.
func Compact(v []byte) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			i = StringEnd(v, i) - 1
		case IsSpace(c):
			var b bytes.Buffer
			b.Grow(len(v))
			if json.Compact(&b, v) != nil {
				return v
			}
			return b.Bytes()
		}
	}
	return v
}
