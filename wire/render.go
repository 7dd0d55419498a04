package wire

import (
	"bytes"
	"encoding/json"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/bodybuf"
)

// Renderer is one branch's rendering of the context ctxd sends
// (docs/design.md §10): it turns the canonical messages of an assembled
// context into the outgoing request body, keeping, from one request of the
// branch to the next, what makes the next cheap — the previous rendering,
// the encodings of the messages sent, and its index of the client's items
// by their rendering, so that what ctxd did not rewrite goes upstream as
// the client's own bytes. A dialect makes one per branch
// (Dialect.NewRenderer). Its caches only save work: a new Renderer gives
// the same bytes. A Renderer is used by one request at a time.
type Renderer interface {
	// Render returns the outgoing body of req with its conversation
	// replaced by msgs rendered: the client's prefix items first, the
	// client's cache markers where the client put them, and req.Tail
	// after (the Messages API). Every byte outside the conversation is
	// the client's. It fails when msgs break a provider rule for the
	// client's request (docs/design.md §4a: an error wrapping
	// history.ErrProviderRule), or when an encoding fails.
	Render(msgs []history.Message, req *RenderRequest) (*bodybuf.Body, error)
	// Bytes estimates the heap the renderer's caches hold, in bytes: what
	// the proxy's memory bound (proxy.memory_bytes) counts.
	Bytes() int64
}

// RenderRequest is the client's request as a Renderer reads it: its body
// as scanned (Request), and what the proxy knows of its items.
type RenderRequest struct {
	// Body is the client's body and Buf the pooled buffer it is in (nil:
	// not pooled); the outgoing body may point into it. MsgStart and
	// MsgEnd bound the conversation's value in Body (Request).
	Body             []byte
	Buf              *bodybuf.Buf
	MsgStart, MsgEnd int
	// Items are the client's items that ctxd's context answers (all of
	// them but Tail), Prefix how many lead as the fixed prefix
	// (Dialect.IsPrefix). Tail, when set, is the client's newest items,
	// sent as they came after ctxd's context (the Messages API).
	Items  []json.RawMessage
	Prefix int
	Tail   []json.RawMessage
	// Tools, Thinking, Stream and StreamOptions are the body's members
	// (Request).
	Tools, Thinking json.RawMessage
	Stream          bool
	StreamOptions   json.RawMessage
	// Fast and Marked are Digests.Fast and Digests.Marked of the
	// client's items (nil or short: not known).
	Fast   []uint64
	Marked []bool
	// Checked, when set, is the engine's docs/design.md §4a check of msgs
	// as assembled, so the renderer answers for the client's thinking
	// setting without reading them again; nil: msgs are checked here.
	Checked *history.Checked
	// Reading, when set, is the append's reading of the client's newest
	// items, so they are keyed without being read again.
	Reading *Reading
	// Verify (tests) makes the renderer compare each cached or reused
	// result with the one computed from scratch, and fail when they
	// differ.
	Verify bool
}

// Reading is how the client's items from From on were read: item From+j
// as Msgs[Ends[j-1]:Ends[j]] (Ends[-1] being 0).
type Reading struct {
	From int
	Msgs []history.Message
	Ends []int
}

// Of returns the messages item k was read as; ok false when the reading
// does not hold k.
func (r *Reading) Of(k int) (msgs []history.Message, ok bool) {
	if r == nil {
		return nil, false
	}
	j := k - r.From
	if r.Ends == nil || j < 0 || j >= len(r.Ends) {
		return nil, false
	}
	start := 0
	if j > 0 {
		start = r.Ends[j-1]
	}
	return r.Msgs[start:r.Ends[j]], true
}

// SpliceItems returns body with its conversation's value, body[start:end],
// replaced by items: every other byte is the client's.
func SpliceItems(body []byte, start, end int, items []byte) []byte {
	out := make([]byte, 0, len(body)-(end-start)+len(items))
	out = append(out, body[:start]...)
	out = append(out, items...)
	return append(out, body[end:]...)
}

// ItemsBody is the outgoing body of req: the client's body with its
// conversation replaced by the client's prefix items, then out, then
// trailing (nil: none), as a JSON array.
func (req *RenderRequest) ItemsBody(out []json.RawMessage, trailing json.RawMessage) *bodybuf.Body {
	items := make([]json.RawMessage, 0, req.Prefix+len(out)+1)
	items = append(items, req.Items[:req.Prefix]...)
	items = append(items, out...)
	if trailing != nil {
		items = append(items, trailing)
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(it)
	}
	buf.WriteByte(']')
	return bodybuf.Of(SpliceItems(req.Body, req.MsgStart, req.MsgEnd, buf.Bytes()))
}
