package anthropic

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// EncodeMessage returns json.Marshal(m)'s bytes, written in one pass:
// json.Marshal encodes each block by its MarshalJSON and then reads the
// result again to compact and escape it, which on a message of a large
// tool result is most of its time. Errors: json.Marshal's.
func EncodeMessage(m *Message) ([]byte, error) {
	n := 32
	for i := range m.Content {
		n += blockSize(&m.Content[i])
	}
	dst := make([]byte, 0, n)
	dst = append(dst, `{"role":`...)
	dst = appendString(dst, m.Role)
	dst = append(dst, `,"content":`...)
	if m.Content == nil {
		dst = append(dst, "null"...)
	} else {
		var err error
		if dst, err = appendBlocks(dst, m.Content); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// blockSize is a guess of b's encoded size, for the buffer's capacity.
func blockSize(b *Block) int {
	n := 64 + len(b.Text) + len(b.Thinking) + len(b.Signature) + len(b.Data) + len(b.Input) +
		len(b.Compaction) + len(b.Raw) + len(b.CacheControl)
	for i := range b.Content {
		n += blockSize(&b.Content[i])
	}
	return n + n/16
}

// appendBlocks appends the encoding of the array bs.
func appendBlocks(dst []byte, bs []Block) ([]byte, error) {
	dst = append(dst, '[')
	for i := range bs {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendBlock(dst, &bs[i]); err != nil {
			return nil, err
		}
	}
	return append(dst, ']'), nil
}

// appendBlock appends what json.Marshal writes for b inside a message:
// Block.MarshalJSON's bytes, compacted, with <, >, &, U+2028 and U+2029
// escaped in strings.
func appendBlock(dst []byte, b *Block) ([]byte, error) {
	if len(b.Raw) > 0 || b.Type == "compaction" {
		// Rare: Block.MarshalJSON, compacted and escaped by json.Marshal
		// (a json.RawMessage is written so).
		e, err := b.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return appendRaw(dst, e)
	}
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, b.Type)
	dst = appendMember(dst, `,"text":`, b.Text)
	dst = appendMember(dst, `,"thinking":`, b.Thinking)
	dst = appendMember(dst, `,"signature":`, b.Signature)
	dst = appendMember(dst, `,"data":`, b.Data)
	dst = appendMember(dst, `,"id":`, b.ID)
	dst = appendMember(dst, `,"name":`, b.Name)
	var err error
	if len(b.Input) > 0 {
		dst = append(dst, `,"input":`...)
		if dst, err = appendRaw(dst, b.Input); err != nil {
			return nil, err
		}
	}
	dst = appendMember(dst, `,"tool_use_id":`, b.ToolUseID)
	if len(b.Content) > 0 {
		dst = append(dst, `,"content":`...)
		if dst, err = appendBlocks(dst, b.Content); err != nil {
			return nil, err
		}
	}
	if b.IsError {
		dst = append(dst, `,"is_error":true`...)
	}
	if b.Source != nil {
		e, err := json.Marshal(b.Source)
		if err != nil {
			return nil, err
		}
		dst = append(dst, `,"source":`...)
		dst = append(dst, e...)
	}
	if len(b.CacheControl) > 0 {
		dst = append(dst, `,"cache_control":`...)
		if dst, err = appendRaw(dst, b.CacheControl); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// appendMember appends key and s's encoding unless s is "" (omitempty).
func appendMember(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	return appendString(append(dst, key...), s)
}

// appendRaw appends raw as json.Marshal writes a json.RawMessage:
// compacted, with <, >, &, U+2028 and U+2029 escaped. Errors: raw is not
// JSON.
func appendRaw(dst, raw []byte) ([]byte, error) {
	var c bytes.Buffer
	c.Grow(len(raw))
	if err := json.Compact(&c, raw); err != nil {
		return nil, err
	}
	if !needsHTMLEscape(c.Bytes()) {
		return append(dst, c.Bytes()...), nil
	}
	var e bytes.Buffer
	json.HTMLEscape(&e, c.Bytes())
	return append(dst, e.Bytes()...), nil
}

// needsHTMLEscape reports whether b holds a byte json.HTMLEscape changes.
func needsHTMLEscape(b []byte) bool {
	return bytes.ContainsAny(b, "<>&") || bytes.Contains(b, lineSep) || bytes.Contains(b, paraSep)
}

var (
	lineSep = []byte("\u2028")
	paraSep = []byte("\u2029")
)

const hexDigits = "0123456789abcdef"

// appendString appends s as encoding/json writes a string with HTML
// escaping (json.Marshal's): quotes and backslashes escaped, control
// characters as \b \f \n \r \t or \u00XX, <, > and & as \u003c \u003e
// \u0026, U+2028 and U+2029 escaped, each invalid byte as \ufffd.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
