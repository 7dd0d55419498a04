// Package bodybuf holds request bodies in pooled buffers and outgoing
// bodies as parts (docs/performance.md): a ~1 MB managed request is read
// into a reused buffer of its size class, and its outgoing body is the
// client's bytes and ctxd's, sent part by part, never copied together.
package bodybuf

import (
	"errors"
	"io"
	"math/bits"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Read reads a request's body, at most limit bytes. With a
// Content-Length it reads into buffers from the pools of their size
// classes (Get; io.ReadAll would allocate and zero new ones),
// doubling as the bytes arrive up to that length: a client that announces
// a large body and sends it slowly holds at most twice what it sent, not
// what it announced. The caller releases the returned *Buf (nil when
// not pooled) when the request is done.
func Read(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Buf, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	n := r.ContentLength
	if n <= 0 || n > limit {
		b, err := io.ReadAll(rd)
		return b, nil, err
	}
	var (
		bb  *Buf
		buf []byte
		got int
	)
	for size := min(int(n), firstChunk); ; size = min(2*size, int(n)) {
		nbb := Get(size)
		var nbuf []byte
		if nbb != nil {
			nbuf = nbb.B
		} else {
			nbuf = make([]byte, size)
		}
		copy(nbuf, buf[:got])
		bb.Release()
		bb, buf = nbb, nbuf
		k, err := io.ReadFull(rd, buf[got:])
		got += k
		if err != nil {
			bb.Release()
			return nil, nil, err
		}
		if size == int(n) {
			break
		}
	}
	// A body longer than its Content-Length (the server refuses one; a
	// handler called directly may not): the rest too.
	var one [1]byte
	if k, _ := io.ReadFull(rd, one[:]); k == 1 {
		rest, err := io.ReadAll(rd)
		body := append(append(append(make([]byte, 0, len(buf)+1+len(rest)), buf...), one[0]), rest...)
		bb.Release()
		return body, nil, err
	}
	return buf, bb, nil
}

// firstChunk is the first buffer Read reads a body into, in bytes.
const firstChunk = 256 << 10

// Body is an outgoing request body: its parts, sent one after the
// other, never copied into one buffer on the way (a managed request's
// ~1 MB body is the client's prefix, the messages' cached encodings or
// the client's own bytes of them, and the client's suffix; copying them
// together cost an allocation, its zeroing and a copy of the whole body
// per request, docs/performance.md). The parts are not changed once
// given: the transport may read them after the request was answered, and
// an overflow retry resends them.
type Body struct {
	// Parts are the body's bytes in order; not changed once given.
	Parts [][]byte
	n     int
	// buf, when set, is the pooled buffer some parts point into: each
	// reader holds it until closed (Buf).
	buf *Buf
}

// Of is the outgoing body b (nil: none), not pooled.
func Of(b []byte) *Body {
	if b == nil {
		return nil
	}
	return &Body{Parts: [][]byte{b}, n: len(b)}
}

// Pooled is the body b, one part, in the pooled buffer buf (nil: not
// pooled).
func Pooled(b []byte, buf *Buf) *Body {
	return &Body{Parts: [][]byte{b}, n: len(b), buf: buf}
}

// New is an empty body whose parts will point into the pooled buffer buf
// (nil: none), with room for parts parts.
func New(buf *Buf, parts int) *Body {
	return &Body{Parts: make([][]byte, 0, parts), buf: buf}
}

// Add appends the part b.
func (o *Body) Add(b []byte) {
	if len(b) > 0 {
		o.Parts = append(o.Parts, b)
		o.n += len(b)
	}
}

// Len is the body's size in bytes.
func (o *Body) Len() int { return o.n }

// Bytes returns the body in one slice: the part itself when there is one,
// else a copy of the parts.
func (o *Body) Bytes() []byte {
	if len(o.Parts) == 1 {
		return o.Parts[0]
	}
	out := make([]byte, 0, o.n)
	for _, p := range o.Parts {
		out = append(out, p...)
	}
	return out
}

// Reader returns a new reader of the whole body, for the transport: it
// implements io.WriterTo (a copy to a writer makes no copy of its own).
// When the body points into a pooled buffer, the reader holds it until
// its Close, and reads nothing after Close (http.RoundTripper: the
// transport closes the body when done with it, possibly after the answer
// came). Errors: ErrGone when the buffer was released already.
func (o *Body) Reader() (io.ReadCloser, error) {
	if o.buf != nil && !o.buf.Acquire() {
		return nil, ErrGone
	}
	return &reader{bufs: append(net.Buffers(nil), o.Parts...), buf: o.buf}, nil
}

// Gone is a reader that fails every read with ErrGone.
func Gone() io.ReadCloser { return &reader{closed: true} }

// ErrGone: a reader of an outgoing body was asked for after its
// request ended (its pooled buffer released).
var ErrGone = errors.New("the outgoing body's buffer was released")

// reader reads an outBody; see Body.Reader.
type reader struct {
	mu     sync.Mutex
	bufs   net.Buffers
	buf    *Buf
	closed bool
}

func (r *reader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrGone
	}
	return r.bufs.Read(p)
}

// WriteTo writes the rest of the body to w, part by part.
func (r *reader) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return n, ErrGone
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
func (r *reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.bufs = nil
		r.buf.Release()
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
	// MinPooled and MaxPooled bound the bodies read into pooled
	// buffers, in bytes: smaller ones are cheap to allocate, larger ones
	// rare.
	MinPooled = 64 << 10
	MaxPooled = 64 << 20
)

// pools[c] holds *Buf of capacity 1<<c.
var pools [27]sync.Pool

// Buf is a pooled buffer and its holders: the request reading it,
// and each open reader of an outgoing body pointing into it.
type Buf struct {
	// B is the buffer's bytes.
	B    []byte
	refs atomic.Int32
}

// SizeClass is the pool of a body of n bytes: the smallest c with
// 1<<c >= n.
func SizeClass(n int) int { return bits.Len(uint(n - 1)) }

// Get returns a buffer of length n (its content undefined) held
// once, by the caller; nil when n is outside the pooled sizes.
func Get(n int) *Buf {
	if n < MinPooled || n > MaxPooled {
		return nil
	}
	c := SizeClass(n)
	bb, _ := pools[c].Get().(*Buf)
	if bb == nil {
		bb = &Buf{B: make([]byte, 1<<c)}
	}
	bb.B = bb.B[:n]
	bb.refs.Store(1)
	return bb
}

// Acquire adds a holder; false when the buffer was released already.
func (bb *Buf) Acquire() bool {
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

// Release drops a holder; the last one puts the buffer back in its pool.
// A nil buffer is a no-op.
func (bb *Buf) Release() {
	if bb == nil {
		return
	}
	if bb.refs.Add(-1) == 0 {
		pools[SizeClass(cap(bb.B))].Put(bb)
	}
}
