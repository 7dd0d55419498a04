package wire

import (
	"bytes"

	"github.com/ctxd/ctxd/internal/rawjson"
)

// The normalisation a resent message is matched by (docs/design.md §10),
// the same for every API: a client's moving prompt-cache marker is left
// out, and plain text compares alike in the forms clients switch between.
// Only bytes are compared and cut: nothing is re-encoded.

var (
	// CacheControlKey is the Messages API's cache marker's key, quoted.
	CacheControlKey = []byte(`"cache_control"`)
	// controlTail is the key's tail, a cheap first filter: a search for
	// a pattern that starts with a quote stops at every quote of the JSON.
	controlTail = []byte(`_control"`)
)

// HasMarker reports whether b contains the "cache_control" key's bytes.
func HasMarker(b []byte) bool {
	return bytes.Contains(b, controlTail) && bytes.Contains(b, CacheControlKey)
}

// Normalize returns a message's bytes with every "cache_control" member
// removed, so a message hashes the same whether or not the client's moving
// prompt-cache marker sits on it (docs/design.md §10). Bytes without the key are
// returned as they are; otherwise the member is cut textually (no
// re-encoding), which gives the same bytes as a client that never wrote it.
func Normalize(b []byte) []byte {
	if !HasMarker(b) {
		return b
	}
	return normalize(b)
}

// NormalizeMarked is Normalize(b), b being item k of a list whose
// marked (Digests.Marked) says, when k is in range, whether it holds a
// marker: b is not searched for one again.
func NormalizeMarked(b []byte, marked []bool, k int) []byte {
	if k >= len(marked) {
		return Normalize(b)
	}
	if !marked[k] {
		return b
	}
	return normalize(b)
}

// normalize is Normalize for bytes HasMarker found a marker in.
func normalize(b []byte) []byte {
	out := make([]byte, 0, len(b))
	i := 0
	for i < len(b) {
		c := b[i]
		if c != '"' {
			out = append(out, c)
			i++
			continue
		}
		end := rawjson.StringEnd(b, i)
		if bytes.Equal(b[i:end], CacheControlKey) {
			j := rawjson.SkipSpace(b, end)
			if j < len(b) && b[j] == ':' {
				vEnd := rawjson.ValueEnd(b, rawjson.SkipSpace(b, j+1))
				trimmed := bytes.TrimRight(out, " \t\r\n")
				if n := len(trimmed); n > 0 && trimmed[n-1] == ',' {
					out = trimmed[:n-1]
					i = vEnd
					continue
				}
				// The first member: drop the comma after it instead.
				k := rawjson.SkipSpace(b, vEnd)
				if k < len(b) && b[k] == ',' {
					k = rawjson.SkipSpace(b, k+1)
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

var textType = []byte(`"text"`)

// TextContent returns a message (markers already removed) whose content is
// one text block and nothing else, [{"type":"text","text":S}], with the
// content written as the string S: the Messages API reads both the same,
// and a client sends one form in a request and the other in the next
// (Claude Code), so they must hash alike. Any other message is returned as
// it is. Only bytes are compared and cut: nothing is re-encoded.
func TextContent(m []byte) []byte {
	if !bytes.Contains(m, textType) {
		return m
	}
	cs, ce := -1, -1
	rawjson.Members(m, func(key string, vs, ve int) bool {
		if key == "content" {
			cs, ce = vs, ve
			return false
		}
		return true
	})
	if cs < 0 || m[cs] != '[' {
		return m
	}
	text := rawjson.BareText(m[cs:ce], textType)
	if text == nil {
		return m
	}
	out := make([]byte, 0, len(m))
	out = append(out, m[:cs]...)
	out = append(out, text...)
	return append(out, m[ce:]...)
}

// PlainText reports whether the message m's content is plain text in
// either of the forms a client switches between: a string, or one bare
// text block (TextContent).
func PlainText(m []byte) bool { return plainText(Normalize(m)) }

// PlainTextMarked is PlainText(m), m being item k of a list whose marked
// (Digests.Marked) says, when k is in range, whether it holds a marker.
func PlainTextMarked(m []byte, marked []bool, k int) bool {
	return plainText(NormalizeMarked(m, marked, k))
}

// plainText is PlainText of n, a message without markers (Normalize).
func plainText(n []byte) bool {
	if t := TextContent(n); len(t) != len(n) {
		return true
	}
	str := false
	rawjson.Members(n, func(key string, vs, ve int) bool {
		if key == "content" {
			str = n[vs] == '"'
			return false
		}
		return true
	})
	return str
}

// MatchForm is the form a message (markers already removed: Normalize) is
// matched and keyed by (docs/design.md §10): a content of one bare text block
// written as the block's string, as TextContent does, the block's type
// being "text" or the Responses API's "input_text" / "output_text"; and a
// Responses item's "type":"message" member (the API's default type) cut.
// So a Responses "input" given as a string, {"role":"user","content":S},
// and the same text as one message item,
// {"type":"message","role":"user","content":[{"type":"input_text","text":S}]},
// match, as a Messages string and one text block do. A message without
// either is returned as it is; a Messages or Chat message has the bytes
// TextContent gives. Only bytes are compared and cut: nothing is
// re-encoded.
func MatchForm(m []byte) []byte {
	if !bytes.Contains(m, textType) && !bytes.Contains(m, typeMessage) {
		return m
	}
	ts, te, cs, ce := -1, -1, -1, -1
	if !rawjson.MembersAt(m, func(key string, ks, vs, ve int) bool {
		switch key {
		case "type":
			if bytes.Equal(m[vs:ve], typeMessage) {
				ts, te = ks, ve
			}
		case "content":
			cs, ce = vs, ve
		}
		return true
	}) {
		return m
	}
	var lit []byte // the content's replacement, nil: kept
	if cs >= 0 && m[cs] == '[' {
		lit = oneTextBlock(m[cs:ce])
	}
	if ts < 0 && lit == nil {
		return m
	}
	type cut struct {
		s, e int
		with []byte
	}
	var cuts []cut
	if ts >= 0 {
		// The member and the comma after it, or the comma before it when
		// it is the last.
		if k := rawjson.SkipSpace(m, te); k < len(m) && m[k] == ',' {
			te = rawjson.SkipSpace(m, k+1)
		} else {
			p := ts - 1
			for p > 0 && rawjson.IsSpace(m[p]) {
				p--
			}
			if m[p] == ',' {
				ts = p
			}
		}
		cuts = append(cuts, cut{ts, te, nil})
	}
	if lit != nil {
		c := cut{cs, ce, lit}
		if len(cuts) > 0 && cs < cuts[0].s {
			cuts = []cut{c, cuts[0]}
		} else {
			cuts = append(cuts, c)
		}
	}
	out := make([]byte, 0, len(m))
	at := 0
	for _, c := range cuts {
		out = append(out, m[at:c.s]...)
		out = append(out, c.with...)
		at = c.e
	}
	return append(out, m[at:]...)
}

// oneTextBlock returns the string literal of the content array a when it
// holds one bare text block ({"type":T,"text":S} and nothing else, T one
// of textTypes); nil otherwise.
func oneTextBlock(a []byte) []byte { return rawjson.BareText(a, textTypes...) }

var (
	typeMessage = []byte(`"message"`)
	// textTypes are the types of a bare text block: the Messages API's and
	// Chat's "text", the Responses API's "input_text" and "output_text".
	textTypes = [][]byte{textType, []byte(`"input_text"`), []byte(`"output_text"`)}
)
