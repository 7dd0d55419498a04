package anthropic

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
)

// What the proxy needs to send a conversation it rendered as the client's
// own bytes where it rewrote nothing, with the client's prompt-cache
// markers where the client put them (docs/design.md §10, docs/proxy.md
// "Blocks are carried").

// Carry is how a conversation read from the Messages wire is rendered
// back: every block ctxd has no model of is carried as the client sent
// it, never flattened to text.
var Carry = Options{Carry: true}

// MarkerReach is how many messages from the end PlaceMarkers may mark.
const MarkerReach = 8

// ClientKey is the digest of the marker-free encoding of ctxd's rendering
// of the client's message raw read alone (with Carry); ok false unless it
// renders to exactly one message. An outgoing message with the same
// MarkerFreeDigest is ctxd's rendering of raw, unchanged. results: raw
// reads as tool results (a user message of tool_result blocks).
func ClientKey(raw json.RawMessage) (d [sha256.Size]byte, results, ok bool) {
	ms, err := ParseMessage(raw, nil)
	if err != nil {
		return d, false, false
	}
	return ClientKeyOf(ms)
}

// ClientKeyOf is ClientKey of the message that ParseMessage read as ms
// (with any tool names: the rendering has none), without reading it again.
func ClientKeyOf(ms []history.Message) (d [sha256.Size]byte, results, ok bool) {
	w := RenderWith("", nil, ms, Carry).Messages
	if len(w) != 1 {
		return d, false, false
	}
	e, err := EncodeMessage(&w[0])
	if err != nil {
		return d, false, false
	}
	return sha256.Sum256(e), len(ms) > 0 && ms[0].Role == history.RoleTool, true
}

// ClientBytes returns the client's own bytes raw for the outgoing message
// m, ctxd's rendering of raw unchanged, when the client's markers on it
// are the ones m carries: raw as sent, or with its markers cut when m
// carries none (unmarked: raw is known to hold none); for plain text
// (plain: wire.PlainText), one form whichever the client sent, with the
// client's text bytes (PlainBytes). A verbatim message (a "system"
// message, which ctxd reads as user text and would otherwise send as a
// user message without its markers) is always raw. nil when m must be
// sent as ctxd rendered it.
func ClientBytes(raw json.RawMessage, m *Message, verbatim, plain, unmarked bool) []byte {
	if verbatim {
		return raw
	}
	if plain {
		// One form whichever of the two the client sends (Claude Code
		// switches: wire.TextContent), the text as the client wrote it.
		return PlainBytes(raw, m)
	}
	if !hasMarkers(m) {
		if unmarked {
			return raw // wire.Normalize(raw), known to hold no marker
		}
		return wire.Normalize(raw)
	}
	if !wire.HasMarker(raw) {
		return nil
	}
	_, cc, _ := clientMarkers(raw)
	if len(cc) != len(m.Content) {
		return nil
	}
	nested, _ := nestedMarkers(raw)
	for i := range cc {
		b := &m.Content[i]
		if !bytes.Equal(cc[i], b.CacheControl) {
			return nil
		}
		// The markers inside a tool_result's content: those PlaceMarkers
		// placed, or raw would carry one twice or one ctxd moved.
		var n []json.RawMessage
		if i < len(nested) {
			n = nested[i]
		}
		if len(n) > 0 && len(n) != len(b.Content) {
			return nil
		}
		for j := range b.Content {
			var c json.RawMessage
			if len(n) > 0 {
				c = n[j]
			}
			if !bytes.Equal(c, b.Content[j].CacheControl) {
				return nil
			}
		}
	}
	return raw
}

// hasMarkers reports whether a block of m, or a block in the content of
// one of m's blocks, has a cache marker.
func hasMarkers(m *Message) bool {
	top, nested := markersOf(m)
	return top || nested
}

// markersOf reports whether a block of m has a cache marker (top) and
// whether a block in the content of one of m's blocks has one (nested).
func markersOf(m *Message) (top, nested bool) {
	for i := range m.Content {
		b := &m.Content[i]
		top = top || len(b.CacheControl) > 0
		for j := range b.Content {
			nested = nested || len(b.Content[j].CacheControl) > 0
		}
	}
	return top, nested
}

// MarkerFreeDigest is the digest of m's encoding without the cache markers
// PlaceMarkers sets (enc is m's encoding with them: json.Marshal's,
// EncodeMessage's).
func MarkerFreeDigest(m *Message, enc []byte) ([sha256.Size]byte, error) {
	top, nested := markersOf(m)
	if !top && !nested {
		return sha256.Sum256(enc), nil
	}
	if nested {
		// Rare (a marker inside a tool_result's content): cutMarkers
		// follows the blocks of the message only.
		return reencodedDigest(m)
	}
	if free, ok := cutMarkers(m, enc); ok {
		return sha256.Sum256(free), nil
	}
	return reencodedDigest(m)
}

// reencodedDigest is MarkerFreeDigest by encoding m again without its
// markers: what cutMarkers gives in one scan of the encoding, and what is
// done when that scan cannot follow it.
func reencodedDigest(m *Message) ([sha256.Size]byte, error) {
	c := *m
	c.Content = slices.Clone(m.Content)
	for i := range c.Content {
		c.Content[i].CacheControl = nil
		c.Content[i].Content = withoutNestedMarkers(c.Content[i].Content)
	}
	e, err := EncodeMessage(&c)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(e), nil
}

// withoutNestedMarkers is bs without their cache markers: bs itself when
// none has one, else a copy.
func withoutNestedMarkers(bs []Block) []Block {
	for j := range bs {
		if len(bs[j].CacheControl) > 0 {
			c := slices.Clone(bs)
			for k := range c {
				c[k].CacheControl = nil
			}
			return c
		}
	}
	return bs
}

// cutMarkers returns enc, the encoding of m (json.Marshal), without the
// "cache_control" member of each of m's blocks that carries one: the
// block's last member as Block.MarshalJSON writes it, so what is left is
// the encoding of m without its markers, byte for byte. ok false when enc
// does not read as such (the caller encodes again).
func cutMarkers(m *Message, enc []byte) (out []byte, ok bool) {
	cs, ce, found := rawjson.MemberRange(enc, "content")
	if !found || enc[cs] != '[' {
		return nil, false
	}
	out = make([]byte, 0, len(enc))
	from := 0 // enc[from:] is not yet copied to out
	i := rawjson.SkipSpace(enc, cs+1)
	for k := range m.Content {
		if i >= ce || enc[i] != '{' {
			return nil, false
		}
		end := rawjson.ValueEnd(enc, i)
		if end <= i || end > ce {
			return nil, false
		}
		if len(m.Content[k].CacheControl) > 0 {
			// The member is the block's last: cut from the comma before
			// its key to the end of its value.
			lastKey, lastKS, lastVE := "", -1, -1
			if !rawjson.MembersAt(enc[i:end], func(key string, ks, _, ve int) bool {
				lastKey, lastKS, lastVE = key, ks, ve
				return true
			}) || lastKey != "cache_control" {
				return nil, false
			}
			comma := i + lastKS - 1
			for comma > i && rawjson.IsSpace(enc[comma]) {
				comma--
			}
			if enc[comma] != ',' {
				return nil, false
			}
			out = append(out, enc[from:comma]...)
			from = i + lastVE
		}
		i = rawjson.SkipSpace(enc, end)
		if k < len(m.Content)-1 {
			if i >= ce || enc[i] != ',' {
				return nil, false
			}
			i = rawjson.SkipSpace(enc, i+1)
		}
	}
	if i != ce-1 || enc[i] != ']' {
		return nil, false
	}
	return append(out, enc[from:]...), true
}

// PlainBytes is the outgoing form of the client's plain text message raw
// (wire.PlainText) whose rendering, with the markers ctxd placed, is m: one
// text block, {"role":R,"content":[{"type":"text","text":T}]} with m's
// marker after T, where T is the client's own string literal, escapes and
// bytes as sent (json.Marshal would write invalid UTF-8 and a lone
// surrogate escape as U+FFFD, and <, > and & as \u003c…). It is
// json.Marshal(m) when the client's literal is Go's encoding of the text,
// and the same bytes whichever form, string or block, the client sent.
// nil when m is not one text block (ctxd's rendering then goes).
func PlainBytes(raw json.RawMessage, m *Message) []byte {
	if len(m.Content) != 1 || m.Content[0].Type != "text" {
		return nil
	}
	t := wire.TextContent(wire.Normalize(raw))
	var lit []byte
	rawjson.Members(t, func(key string, vs, ve int) bool {
		if key == "content" {
			if t[vs] == '"' {
				lit = t[vs:ve]
			}
			return false
		}
		return true
	})
	if lit == nil {
		return nil
	}
	role, _ := json.Marshal(m.Role)
	cc := m.Content[0].CacheControl
	out := make([]byte, 0, len(lit)+len(role)+len(cc)+64)
	out = append(out, `{"role":`...)
	out = append(out, role...)
	out = append(out, `,"content":[{"type":"text","text":`...)
	out = append(out, lit...)
	if len(cc) > 0 {
		out = append(out, `,"cache_control":`...)
		out = append(out, cc...)
	}
	return append(out, `}]}`...)
}

// EqualMessage reports whether two wire messages are identical.
func EqualMessage(a, b *Message) bool {
	return a.Role == b.Role && EqualBlocks(a.Content, b.Content)
}

// EqualBlocks reports whether two block lists are identical; the same
// backing array is equal without a look (a cached rendering's).
func EqualBlocks(a, b []Block) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) > 0 && &a[0] == &b[0] {
		return true // the same blocks (the renderer's cache, renderer.extend)
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Type != y.Type || x.Text != y.Text || x.Thinking != y.Thinking || x.Signature != y.Signature ||
			x.Data != y.Data || x.ID != y.ID || x.Name != y.Name || !bytes.Equal(x.Input, y.Input) ||
			x.ToolUseID != y.ToolUseID || x.IsError != y.IsError || !bytes.Equal(x.CacheControl, y.CacheControl) ||
			!bytes.Equal(x.Raw, y.Raw) ||
			(x.Source == nil) != (y.Source == nil) || (x.Source != nil && *x.Source != *y.Source) ||
			!EqualBlocks(x.Content, y.Content) {
			return false
		}
	}
	return true
}

// PlaceMarkers puts the client's prompt-cache markers on the outgoing
// messages (docs/design.md §10): aligned from the end, a message of the same
// role and block count takes the client's markers block by block, and a
// tool_result whose content has as many blocks as the client's takes the
// markers of the blocks of its content (a client may mark a block there);
// the marker of the client's last message, if it could not be placed so,
// goes on the last cacheable block of the last outgoing message. Each
// marker of the client is placed once at most, so the outgoing messages
// carry no more than the client's (the API takes 4).
//
// marked[i], when i is in range, says whether client[i] holds the
// marker's key (wire.Digests.Marked, wire.HasMarker), so that the
// client's newest messages, tens of KB each, are not searched again.
func PlaceMarkers(out []Message, client []json.RawMessage, marked []bool) {
	if len(out) == 0 {
		return
	}
	lastPlaced := false
	for k := 0; k < min(len(out), len(client), MarkerReach); k++ {
		i := len(client) - 1 - k
		raw := client[i]
		if i < len(marked) {
			if !marked[i] {
				continue
			}
		} else if !wire.HasMarker(raw) {
			continue
		}
		role, cc, any := clientMarkers(raw)
		nested, anyNested := nestedMarkers(raw)
		o := &out[len(out)-1-k]
		if !(any || anyNested) || role != o.Role || len(cc) != len(o.Content) {
			continue
		}
		placed := any
		for j := range cc {
			if len(cc[j]) > 0 {
				o.Content[j].CacheControl = cc[j]
			}
			if j < len(nested) && placeNested(&o.Content[j], nested[j]) {
				placed = true
			}
		}
		lastPlaced = lastPlaced || (k == 0 && placed)
	}
	if lastPlaced {
		return
	}
	_, cc, _ := clientMarkers(client[len(client)-1])
	var marker json.RawMessage
	for _, c := range cc {
		if len(c) > 0 {
			marker = c
		}
	}
	if marker == nil {
		// The client's marker inside a tool_result's content, the last.
		nested, _ := nestedMarkers(client[len(client)-1])
		for _, n := range nested {
			for _, c := range n {
				if len(c) > 0 {
					marker = c
				}
			}
		}
	}
	if marker == nil {
		return
	}
	c := out[len(out)-1].Content
	for j := len(c) - 1; j >= 0; j-- {
		switch c[j].Type {
		case "thinking", "redacted_thinking":
			continue
		}
		c[j].CacheControl = marker
		return
	}
}

// placeNested puts the markers nested, the client's on the blocks of a
// tool_result's content (nestedMarkers), on the blocks of b's content,
// when b is ctxd's rendering of a tool_result with as many blocks; it
// reports whether it placed any. The content is copied first: the
// renderer's cache shares it.
func placeNested(b *Block, nested []json.RawMessage) bool {
	if len(nested) == 0 || b.Type != "tool_result" || len(b.Raw) > 0 || len(nested) != len(b.Content) {
		return false
	}
	c := slices.Clone(b.Content)
	placed := false
	for i := range nested {
		if len(nested[i]) > 0 {
			c[i].CacheControl = nested[i]
			placed = true
		}
	}
	if placed {
		b.Content = c
	}
	return placed
}

// nestedMarkers reads the markers inside the client's message raw: for
// each block, when it is a tool_result whose content is an array, the
// markers of that content's blocks (nil where a block has none), else nil;
// any reports whether there is one. Keys are matched as encoding/json
// matches them (clientMarkers). A message it cannot read gives none.
func nestedMarkers(raw json.RawMessage) (nested [][]json.RawMessage, any bool) {
	var content []byte
	if !rawjson.Members(raw, func(key string, vs, ve int) bool {
		if strings.EqualFold(key, "content") {
			content = raw[vs:ve]
		}
		return true
	}) || len(content) == 0 || content[0] != '[' {
		return nil, false
	}
	blocks, err := rawjson.SplitArray(content)
	if err != nil {
		return nil, false
	}
	nested = make([][]json.RawMessage, len(blocks))
	for i, b := range blocks {
		if n := blockNested(b); n != nil {
			nested[i], any = n, true
		}
	}
	return nested, any
}

// blockNested is the markers of the blocks of the client's block b's
// content when b is a tool_result whose content is an array and one of
// them has a marker (nil where a block has none); nil otherwise.
func blockNested(b []byte) []json.RawMessage {
	if !bytes.Contains(b, wire.CacheControlKey) {
		return nil
	}
	var typ string
	var inner []byte
	rawjson.Members(b, func(key string, vs, ve int) bool {
		switch {
		case strings.EqualFold(key, "type"):
			if json.Unmarshal(b[vs:ve], &typ) != nil {
				typ = ""
			}
		case strings.EqualFold(key, "content"):
			inner = b[vs:ve]
		}
		return true
	})
	if typ != "tool_result" || len(inner) == 0 || inner[0] != '[' {
		return nil
	}
	elems, err := rawjson.SplitArray(inner)
	if err != nil {
		return nil
	}
	n := make([]json.RawMessage, len(elems))
	found := false
	for j, e := range elems {
		rawjson.Members(e, func(key string, vs, ve int) bool {
			if strings.EqualFold(key, "cache_control") {
				n[j] = json.RawMessage(e[vs:ve])
			}
			return true
		})
		found = found || len(n[j]) > 0
	}
	if !found {
		return nil
	}
	return n
}

// sameNested reports whether the client's tool_result block raw has in
// its content the markers the blocks bs carry (none when it has none).
func sameNested(raw []byte, bs []Block) bool {
	n := blockNested(raw)
	if n == nil {
		for i := range bs {
			if len(bs[i].CacheControl) > 0 {
				return false
			}
		}
		return true
	}
	if len(n) != len(bs) {
		return false
	}
	for i := range n {
		if !bytes.Equal(n[i], bs[i].CacheControl) {
			return false
		}
	}
	return true
}

// clientMarkers reads the client's message raw as encoding/json would
// decode it into {role string; content json.RawMessage} and, when content
// is an array, each block into {cache_control json.RawMessage}: its role,
// its blocks' markers (nil where a block has none) and whether any block
// has one. A message it cannot read so gives no markers (and no role when
// the message itself is not one). Only the members it needs are decoded.
func clientMarkers(raw json.RawMessage) (role string, cc []json.RawMessage, any bool) {
	var content []byte
	typeErr := false
	if !rawjson.Members(raw, func(key string, vs, ve int) bool {
		switch {
		case strings.EqualFold(key, "role"):
			if json.Unmarshal(raw[vs:ve], &role) != nil {
				typeErr = true
			}
		case strings.EqualFold(key, "content"):
			content = raw[vs:ve]
		}
		return true
	}) {
		return "", nil, false
	}
	if typeErr {
		return "", nil, false
	}
	if len(content) == 0 || content[0] != '[' {
		return role, nil, false
	}
	blocks, err := rawjson.SplitArray(content)
	if err != nil {
		return role, nil, false
	}
	cc = make([]json.RawMessage, 0, len(blocks))
	for _, b := range blocks {
		var c json.RawMessage
		if string(b) != "null" && !rawjson.Members(b, func(key string, vs, ve int) bool {
			if strings.EqualFold(key, "cache_control") {
				c = json.RawMessage(b[vs:ve])
			}
			return true
		}) {
			return role, nil, false
		}
		cc = append(cc, c)
		any = any || len(c) > 0
	}
	return role, cc, any
}

// ClientResults calls fn for each tool_result block of the client's user
// message raw that has a member the canonical model does not keep
// (cache_reference, a future field): its tool_use_id, a copy of the block
// without its marker, and the digest of ctxd's marker-free rendering of it.
// Only such a block is worth sending as the client's in a message ctxd
// rewrote (WithContent).
func ClientResults(raw json.RawMessage, fn func(toolUseID string, block []byte, key [sha256.Size]byte)) {
	var content json.RawMessage
	rawjson.Members(raw, func(key string, vs, ve int) bool {
		if key == "content" {
			content = raw[vs:ve]
			return false
		}
		return true
	})
	if len(content) == 0 || content[0] != '[' {
		return
	}
	blocks, err := rawjson.SplitArray(content)
	if err != nil {
		return
	}
	for _, blk := range blocks {
		// The cheap test first: carried(blk).Raw is blk without its
		// marker, so it has a member the model lacks only if blk has.
		if !extraMembers(blk) {
			continue
		}
		c, ok := carried(blk)
		if !ok || c.Type != "tool_result" || !extraMembers(c.Raw) {
			continue
		}
		one := make([]byte, 0, len(blk)+32)
		one = append(append(append(one, `{"role":"user","content":[`...), blk...), `]}`...)
		ms, err := ParseMessage(one, nil)
		if err != nil || len(ms) != 1 {
			continue
		}
		w := RenderWith("", nil, ms, Carry).Messages
		if len(w) != 1 || len(w[0].Content) != 1 {
			continue
		}
		e, err := json.Marshal(&w[0].Content[0])
		if err != nil {
			continue
		}
		// A copy: the request's buffer is reused after it is sent.
		fn(w[0].Content[0].ToolUseID, bytes.Clone(c.Raw), sha256.Sum256(e))
	}
}

// extraMembers reports whether the tool_result block raw has a member the
// canonical model does not keep.
func extraMembers(raw []byte) bool {
	extra := false
	rawjson.Members(raw, func(key string, vs, ve int) bool {
		switch key {
		case "type", "tool_use_id", "content", "is_error", "cache_control":
			return true
		}
		extra = true
		return false
	})
	return extra
}

// WithContent is the client's tool_result block raw with its "content"
// member's value replaced by content; nil when raw has no content or
// content is empty.
func WithContent(raw []byte, content []Block) []byte {
	if len(content) == 0 {
		return nil
	}
	enc, err := json.Marshal(content)
	if err != nil {
		return nil
	}
	var out []byte
	rawjson.Members(raw, func(key string, vs, ve int) bool {
		if key != "content" {
			return true
		}
		out = make([]byte, 0, len(raw)-(ve-vs)+len(enc))
		out = append(append(append(out, raw[:vs]...), enc...), raw[ve:]...)
		return false
	})
	return out
}
