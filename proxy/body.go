package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
)

// request is a Messages API request body as the client sent it, read in one
// pass: the fields the proxy needs, and the byte range of "messages" so the
// outgoing body can replace that value and keep every other byte.
type request struct {
	body []byte
	// msgStart and msgEnd bound the messages value in body.
	msgStart, msgEnd int
	messages         []json.RawMessage
	model            string
	stream           bool
	system           json.RawMessage
	tools            json.RawMessage
	metadata         json.RawMessage
	thinking         json.RawMessage
}

// errBadRequest marks a body the proxy cannot manage; the error names the
// field.
var errBadRequest = errors.New("bad request body")

func badField(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", errBadRequest, field, fmt.Sprintf(format, args...))
}

// parseRequest reads body: a JSON object with a "messages" array. Errors
// wrap errBadRequest and name the field.
func parseRequest(body []byte) (*request, error) {
	r := &request{body: body, msgStart: -1}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, badField("body", "%v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, badField("body", "not a JSON object")
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, badField("body", "%v", err)
		}
		key, _ := kt.(string)
		var dst any
		switch key {
		case "messages":
			if r.msgStart >= 0 {
				return nil, badField("messages", "given twice")
			}
			start := valueStart(body, int(dec.InputOffset()))
			if err := dec.Decode(&r.messages); err != nil {
				return nil, badField("messages", "%v", err)
			}
			r.msgStart, r.msgEnd = start, int(dec.InputOffset())
			continue
		case "model":
			dst = &r.model
		case "stream":
			dst = &r.stream
		case "system":
			dst = &r.system
		case "tools":
			dst = &r.tools
		case "metadata":
			dst = &r.metadata
		case "thinking":
			dst = &r.thinking
		default:
			var skip json.RawMessage
			dst = &skip
		}
		if err := dec.Decode(dst); err != nil {
			return nil, badField(key, "%v", err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, badField("body", "%v", err)
	}
	if r.msgStart < 0 {
		return nil, badField("messages", "missing")
	}
	if len(r.messages) == 0 {
		return nil, badField("messages", "empty")
	}
	return r, nil
}

// valueStart is the offset of the value after a key ending at off: past
// the colon and white space.
func valueStart(b []byte, off int) int {
	for off < len(b) && (b[off] == ':' || isSpace(b[off])) {
		off++
	}
	return off
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// withMessages returns the client's body with the messages value replaced
// by msgs: every other byte is the client's (DESIGN.md §10).
func (r *request) withMessages(msgs []byte) []byte {
	out := make([]byte, 0, len(r.body)-(r.msgEnd-r.msgStart)+len(msgs))
	out = append(out, r.body[:r.msgStart]...)
	out = append(out, msgs...)
	return append(out, r.body[r.msgEnd:]...)
}

var cacheControlKey = []byte(`"cache_control"`)

// normalize returns a message's bytes with every "cache_control" member
// removed, so a message hashes the same whether or not the client's moving
// prompt-cache marker sits on it (DESIGN.md §10). Bytes without the key are
// returned as they are; otherwise the member is cut textually (no
// re-encoding), which gives the same bytes as a client that never wrote it.
func normalize(b []byte) []byte {
	if !bytes.Contains(b, cacheControlKey) {
		return b
	}
	out := make([]byte, 0, len(b))
	i := 0
	for i < len(b) {
		c := b[i]
		if c != '"' {
			out = append(out, c)
			i++
			continue
		}
		end := stringEnd(b, i)
		if bytes.Equal(b[i:end], cacheControlKey) {
			j := skipSpace(b, end)
			if j < len(b) && b[j] == ':' {
				vEnd := valueEnd(b, skipSpace(b, j+1))
				trimmed := bytes.TrimRight(out, " \t\r\n")
				if n := len(trimmed); n > 0 && trimmed[n-1] == ',' {
					out = trimmed[:n-1]
					i = vEnd
					continue
				}
				// The first member: drop the comma after it instead.
				k := skipSpace(b, vEnd)
				if k < len(b) && b[k] == ',' {
					k = skipSpace(b, k+1)
				}
				out = trimmed
				i = k
				continue
			}
		}
		out = append(out, b[i:end]...)
		i = end
	}
	return out
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd returns the offset just past the JSON string starting at i.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// valueEnd returns the offset just past the JSON value starting at i.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
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
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
			j++
		}
		return j
	}
}

// digest is a SHA-256.
type digest = [sha256.Size]byte

// chains returns the hash chain over msgs: chains[k] covers msgs[:k]
// (chains[0] is the zero digest), each message normalized.
func chains(msgs []json.RawMessage) []digest {
	out := make([]digest, len(msgs)+1)
	var buf [2 * sha256.Size]byte
	for i, m := range msgs {
		d := sha256.Sum256(normalize(m))
		copy(buf[:sha256.Size], out[i][:])
		copy(buf[sha256.Size:], d[:])
		out[i+1] = sha256.Sum256(buf[:])
	}
	return out
}
