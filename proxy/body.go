package proxy

import (
	"encoding/json"
	"errors"
	"io"
	"math/bits"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire"
)

// request is a managed request body as the client sent it, read in one
// pass: the fields the proxy needs, and the byte range of the conversation
// ("messages", or the Responses API's "input") so the outgoing body can
// replace that value and keep every other byte.
type request struct {
	d    dialect
	body []byte
	// buf is the pooled buffer body was read into (nil: not pooled); the
	// outgoing body holds it while it points into body.
	buf *bodyBuf
	// prefix counts the leading items of the fixed prefix
	// (dialect.isPrefix), kept verbatim ahead of the assembled
	// conversation.
	prefix int
	// OpenAI: prompt_cache_key (a session identity),
	// previous_response_id (server-side state: not managed) and
	// stream_options.
	promptCacheKey     string
	previousResponseID string
	conversation       bool
	streamOptions      json.RawMessage
	// msgStart and msgEnd bound the messages value in body.
	msgStart, msgEnd int
	messages         []json.RawMessage
	model            string
	stream           bool
	system           json.RawMessage
	tools            json.RawMessage
	toolChoice       json.RawMessage
	metadata         json.RawMessage
	thinking         json.RawMessage

	// spliced, when a renderer set it, is the whole outgoing body with the
	// messages it returned already in place of the client's (taken, and
	// cleared, by the caller instead of withMessages).
	spliced *outBody
	// tail, when set, is the client's own new messages, sent as they
	// came after ctxd's context (encode): a managed conversation whose
	// client's new messages break a provider rule (plan.tail).
	tail []json.RawMessage
	// marked[k], when k is in range: messages[k] holds a cache marker
	// (wire.Digests.Marked of this request); out of range: not known.
	marked []bool
	// fast[k], when k is in range: the fast hash of messages[k]'s bytes
	// (wire.Digests.Fast of this request), by which the client-bytes
	// indexes know the messages they indexed; nil: not known.
	fast []uint64
	// checked, when set, is the engine's §4a check of the messages
	// rendered (engine.Assembled.Checked: the assembled context as it
	// came), so the renderer answers for the client's thinking setting
	// without reading them again.
	checked *history.Checked
}

// parseRequest reads body, a Messages API request (parseBody).
func parseRequest(body []byte) (*request, error) { return parseBody(body, dialectAnthropic) }

// parseBody reads body, a request of the dialect d, in one pass
// (wire.Scan): a body whose syntax the scanner cannot follow is refused
// here, with an error wrapping wire.ErrBadRequest that names the field.
func parseBody(body []byte, d dialect) (*request, error) {
	w, err := wire.Scan(body, d)
	if err != nil {
		return nil, err
	}
	return &request{d: d, body: body, prefix: w.Prefix,
		promptCacheKey: w.PromptCacheKey, previousResponseID: w.PreviousResponseID, conversation: w.Conversation,
		streamOptions: w.StreamOptions, msgStart: w.MsgStart, msgEnd: w.MsgEnd, messages: w.Messages,
		model: w.Model, stream: w.Stream, system: w.System, tools: w.Tools, toolChoice: w.ToolChoice,
		metadata: w.Metadata, thinking: w.Thinking}, nil
}

// drainTooLarge prepares the 413 of a body that went over limit bytes: it
// reads and drops what is left of r's body, up to limit more (nothing when
// the Content-Length says more is left than that), and marks the
// connection to be closed after the answer: a client that writes its
// whole body before reading the answer (Python's http.client, curl
// without Expect: 100-continue) would otherwise see a broken pipe or a
// connection reset instead of the 413 (the daemon API does the same,
// docs/api.md). Nothing dropped is kept, and the body's read deadlines
// still apply. r.Body must be the connection's body, not the
// http.MaxBytesReader that hit the limit (which fails every later read).
func drainTooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	w.Header().Set("Connection", "close")
	if r.ContentLength > 2*limit {
		return
	}
	_, _ = io.CopyN(io.Discard, r.Body, limit)
}

// encodedBody names the Content-Encoding of r's body ("" when the body is
// sent as it is): ctxd reads only an unencoded body, so an encoded one is
// forwarded untouched with a diagnostic naming the encoding.
func encodedBody(r *http.Request) string {
	ce := strings.TrimSpace(r.Header.Get("Content-Encoding"))
	if ce == "" || strings.EqualFold(ce, "identity") {
		return ""
	}
	return ce
}

// withMessages returns the client's body with the messages value replaced
// by msgs: every other byte is the client's (docs/design.md §10).
func (r *request) withMessages(msgs []byte) []byte {
	out := make([]byte, 0, len(r.body)-(r.msgEnd-r.msgStart)+len(msgs))
	out = append(out, r.body[:r.msgStart]...)
	out = append(out, msgs...)
	return append(out, r.body[r.msgEnd:]...)
}

// outBody is an outgoing request body: its parts, sent one after the
// other, never copied into one buffer on the way (a managed request's
// ~1 MB body is the client's prefix, the messages' cached encodings or
// the client's own bytes of them, and the client's suffix; copying them
// together cost an allocation, its zeroing and a copy of the whole body
// per request, docs/performance.md). The parts are not changed once
// given: the transport may read them after the request was answered, and
// an overflow retry resends them.
type outBody struct {
	parts [][]byte
	n     int
	// buf, when set, is the pooled buffer some parts point into: each
	// reader holds it until closed (bodyBuf).
	buf *bodyBuf
}

// bodyOf is the outgoing body b (nil: none), not pooled.
func bodyOf(b []byte) *outBody {
	if b == nil {
		return nil
	}
	return &outBody{parts: [][]byte{b}, n: len(b)}
}

// add appends the part b.
func (o *outBody) add(b []byte) {
	if len(b) > 0 {
		o.parts = append(o.parts, b)
		o.n += len(b)
	}
}

// len is the body's size in bytes.
func (o *outBody) len() int { return o.n }

// bytes returns the body in one slice: the part itself when there is one,
// else a copy of the parts.
func (o *outBody) bytes() []byte {
	if len(o.parts) == 1 {
		return o.parts[0]
	}
	out := make([]byte, 0, o.n)
	for _, p := range o.parts {
		out = append(out, p...)
	}
	return out
}

// reader returns a new reader of the whole body, for the transport: it
// implements io.WriterTo (a copy to a writer makes no copy of its own).
// When the body points into a pooled buffer, the reader holds it until
// its Close, and reads nothing after Close (http.RoundTripper: the
// transport closes the body when done with it, possibly after the answer
// came). Errors: errBodyGone when the buffer was released already.
func (o *outBody) reader() (io.ReadCloser, error) {
	if o.buf != nil && !o.buf.acquire() {
		return nil, errBodyGone
	}
	return &bodyReader{bufs: append(net.Buffers(nil), o.parts...), buf: o.buf}, nil
}

// errBodyGone: a reader of an outgoing body was asked for after its
// request ended (its pooled buffer released).
var errBodyGone = errors.New("proxy: the outgoing body's buffer was released")

// bodyReader reads an outBody; see outBody.reader.
type bodyReader struct {
	mu     sync.Mutex
	bufs   net.Buffers
	buf    *bodyBuf
	closed bool
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errBodyGone
	}
	return r.bufs.Read(p)
}

// WriteTo writes the rest of the body to w, part by part.
func (r *bodyReader) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return n, errBodyGone
		}
		if len(r.bufs) == 0 {
			r.mu.Unlock()
			return n, nil
		}
		k, err := w.Write(r.bufs[0])
		n += int64(k)
		if k == len(r.bufs[0]) {
			r.bufs = r.bufs[1:]
		} else {
			r.bufs[0] = r.bufs[0][k:]
		}
		r.mu.Unlock()
		if err != nil {
			return n, err
		}
	}
}

// Close releases the reader's hold of the pooled buffer (once).
func (r *bodyReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.bufs = nil
		r.buf.release()
	}
	return nil
}

// Pooled request buffers. A managed request's body (~1 MB on a 200k-token
// conversation) is read into a buffer from a pool of its size class
// instead of a new one: allocating and zeroing 1 MB per request was a
// large part of the time ctxd adds before the first byte
// (docs/performance.md). A buffer goes back to its pool when the request
// is done with it and every reader of the outgoing body that points into
// it was closed; nothing of the request's body may be kept after the
// request (what outlives it — the held credential's system and tools —
// is copied).
const (
	// minPooledBody and maxPooledBody bound the bodies read into pooled
	// buffers, in bytes: smaller ones are cheap to allocate, larger ones
	// rare.
	minPooledBody = 64 << 10
	maxPooledBody = 64 << 20
)

// bodyPools[c] holds *bodyBuf of capacity 1<<c.
var bodyPools [27]sync.Pool

// bodyBuf is a pooled buffer and its holders: the request reading it,
// and each open reader of an outgoing body pointing into it.
type bodyBuf struct {
	b    []byte
	refs atomic.Int32
}

// sizeClass is the pool of a body of n bytes: the smallest c with
// 1<<c >= n.
func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

// getBodyBuf returns a buffer of length n (its content undefined) held
// once, by the caller; nil when n is outside the pooled sizes.
func getBodyBuf(n int) *bodyBuf {
	if n < minPooledBody || n > maxPooledBody {
		return nil
	}
	c := sizeClass(n)
	bb, _ := bodyPools[c].Get().(*bodyBuf)
	if bb == nil {
		bb = &bodyBuf{b: make([]byte, 1<<c)}
	}
	bb.b = bb.b[:n]
	bb.refs.Store(1)
	return bb
}

// acquire adds a holder; false when the buffer was released already.
func (bb *bodyBuf) acquire() bool {
	for {
		n := bb.refs.Load()
		if n <= 0 {
			return false
		}
		if bb.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a holder; the last one puts the buffer back in its pool.
// A nil buffer is a no-op.
func (bb *bodyBuf) release() {
	if bb == nil {
		return
	}
	if bb.refs.Add(-1) == 0 {
		bodyPools[sizeClass(cap(bb.b))].Put(bb)
	}
}
