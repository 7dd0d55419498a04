package contextedit

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// InputStub is the one-line string a cleared input value is sent as: its
// size in characters (docs/design.md §6 clear_tool_inputs). Same input, same
// bytes.
func InputStub(chars int) string {
	return "[ctxd elided this " + strconv.Itoa(chars) + "-character input field to save context; the call ran with the whole value]"
}

// maxInputDepth bounds the nesting InputStrings and clearInput descend
// into; deeper values are left as they are.
const maxInputDepth = 32

// InputStrings returns the string values of a tool call's input (a JSON
// value, normally an object), in document order: each one's JSON Pointer
// (RFC 6901; "/content", "/edits/0/old_string") and its length in
// characters (code points). Nothing for input that is not valid JSON.
func InputStrings(input json.RawMessage) (paths []string, chars []int) {
	walkStrings(input, "", 0, func(path string, s string) {
		paths = append(paths, path)
		chars = append(chars, utf8.RuneCountInString(s))
	})
	return paths, chars
}

func walkStrings(raw json.RawMessage, path string, depth int, fn func(path, s string)) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || depth > maxInputDepth {
		return
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			fn(path, s)
		}
	case '{':
		members, ok := objectMembers(raw)
		if !ok {
			return
		}
		for _, m := range members {
			walkStrings(m.raw, path+"/"+escapePointer(m.key), depth+1, fn)
		}
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return
		}
		for i, el := range elems {
			walkStrings(el, path+"/"+strconv.Itoa(i), depth+1, fn)
		}
	}
}

// escapePointer escapes a key as a JSON Pointer reference token.
func escapePointer(k string) string {
	if !strings.ContainsAny(k, "~/") {
		return k
	}
	return pointerEscaper.Replace(k)
}

// pointerEscaper is built once: a Replacer builds its lookup tables on first
// use, which per key was most of a context-edit plan's allocation (a profile of
// the 500-agent run, docs/performance.md). A Replacer is safe for concurrent
// use.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

type member struct {
	key string
	raw json.RawMessage
}

// objectMembers splits a JSON object into its members, in order, values as
// they are written; false when raw is not an object.
func objectMembers(raw json.RawMessage) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, ok := t.(string)
		if !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{key: k, raw: v})
	}
	return out, true
}

// clearInput returns input with the string values at paths replaced by
// InputStub: the same shape, keys and order, compact. Input that is not
// valid JSON is returned as it is.
func clearInput(input json.RawMessage, paths []string) json.RawMessage {
	if !json.Valid(input) {
		return input
	}
	var b bytes.Buffer
	rewrite(&b, input, "", 0, paths)
	return b.Bytes()
}

func rewrite(b *bytes.Buffer, raw json.RawMessage, path string, depth int, paths []string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || depth > maxInputDepth {
		_ = json.Compact(b, raw)
		return
	}
	switch raw[0] {
	case '"':
		var s string
		if slices.Contains(paths, path) && json.Unmarshal(raw, &s) == nil {
			writeString(b, InputStub(utf8.RuneCountInString(s)))
			return
		}
	case '{':
		if members, ok := objectMembers(raw); ok {
			b.WriteByte('{')
			for i, m := range members {
				if i > 0 {
					b.WriteByte(',')
				}
				writeString(b, m.key)
				b.WriteByte(':')
				rewrite(b, m.raw, path+"/"+escapePointer(m.key), depth+1, paths)
			}
			b.WriteByte('}')
			return
		}
	case '[':
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) == nil {
			b.WriteByte('[')
			for i, el := range elems {
				if i > 0 {
					b.WriteByte(',')
				}
				rewrite(b, el, path+"/"+strconv.Itoa(i), depth+1, paths)
			}
			b.WriteByte(']')
			return
		}
	}
	_ = json.Compact(b, raw)
}

// writeString writes s as a JSON string without HTML escaping, as
// history's encoding does.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}
