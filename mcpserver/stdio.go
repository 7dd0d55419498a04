package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DrainTimeout bounds how long Serve holds back the end of its input while
// requests it read are still unanswered.
const DrainTimeout = 30 * time.Second

// Serve runs srv over newline-delimited JSON-RPC on in and out (stdin and
// stdout of `ctxctl mcp`) until in ends, ctx is done or the protocol fails.
//
// A client that writes its requests and closes in at once (a pipe) gets
// every answer: the end of in reaches the SDK only once each request read
// (a JSON object with "id" and "method") has its response (an object with
// "id" and no "method") written to out, or after DrainTimeout, or when ctx
// is done. The end of in is a nil error. Invalid JSON on in ends Serve with
// the decoder's error (the SDK's stdio transport answers no -32700 parse
// error; docs/cli.md).
func Serve(ctx context.Context, srv *mcp.Server, in io.Reader, out io.Writer) error {
	d := &drain{ctx: ctx, in: in, out: out, answered: make(chan struct{}, 1), timeout: DrainTimeout}
	t := &mcp.IOTransport{Reader: io.NopCloser(drainReader{d}), Writer: drainWriter{d}}
	err := srv.Run(ctx, t)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// drain counts the requests read and the responses written, and holds the
// end of in back until they match.
type drain struct {
	ctx     context.Context
	in      io.Reader
	out     io.Writer
	timeout time.Duration

	// Read side (the SDK reads from one goroutine).
	line     []byte // the incomplete line read so far
	skipping bool   // the current line outgrew mcp.DefaultMaxLineLength
	eof      error  // the end of in, returned after the drain

	mu        sync.Mutex
	requests  int
	responses int
	answered  chan struct{} // a token after each response written
}

type drainReader struct{ d *drain }

func (r drainReader) Read(p []byte) (int, error) {
	d := r.d
	if d.eof != nil {
		d.wait()
		return 0, d.eof
	}
	n, err := d.in.Read(p)
	d.scan(p[:n])
	if err != nil {
		if len(d.line) > 0 && !d.skipping {
			d.count(d.line, false) // a last line without its newline
		}
		d.line = d.line[:0]
		d.eof = err
		if n > 0 {
			return n, nil // the SDK decodes these bytes before it meets the end
		}
		d.wait()
	}
	return n, err
}

// scan counts the requests among the complete lines of p.
func (d *drain) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			d.append(p)
			return
		}
		d.append(p[:i])
		if !d.skipping {
			d.count(d.line, false)
		}
		d.line, d.skipping = d.line[:0], false
		p = p[i+1:]
	}
}

func (d *drain) append(p []byte) {
	if d.skipping {
		return
	}
	if len(d.line)+len(p) > mcp.DefaultMaxLineLength {
		// The SDK refuses the frame and ends; nothing to count.
		d.line, d.skipping = d.line[:0], true
		return
	}
	d.line = append(d.line, p...)
}

// probe is what tells a JSON-RPC request (id and method) from a response
// (id, no method) and a notification (no id).
type probe struct {
	ID     json.RawMessage `json:"id"`
	Method json.RawMessage `json:"method"`
}

// count adds the requests (read) or responses (written) of one message or
// batch.
func (d *drain) count(msg []byte, written bool) {
	msg = bytes.TrimSpace(msg)
	var probes []probe
	if len(msg) > 0 && msg[0] == '[' {
		if json.Unmarshal(msg, &probes) != nil {
			return
		}
	} else {
		probes = make([]probe, 1)
		if json.Unmarshal(msg, &probes[0]) != nil {
			return
		}
	}
	n := 0
	for _, p := range probes {
		if p.ID != nil && (p.Method != nil) != written {
			n++
		}
	}
	if n == 0 {
		return
	}
	d.mu.Lock()
	if written {
		d.responses += n
	} else {
		d.requests += n
	}
	d.mu.Unlock()
	if written {
		select {
		case d.answered <- struct{}{}:
		default:
		}
	}
}

// wait returns once every request read is answered, after d.timeout, or
// when d.ctx is done.
func (d *drain) wait() {
	timer := time.NewTimer(d.timeout)
	defer timer.Stop()
	for {
		d.mu.Lock()
		done := d.responses >= d.requests
		d.mu.Unlock()
		if done {
			return
		}
		select {
		case <-d.answered:
		case <-timer.C:
			return
		case <-d.ctx.Done():
			return
		}
	}
}

// drainWriter is out; the SDK writes one message or batch per call.
type drainWriter struct{ d *drain }

func (w drainWriter) Write(p []byte) (int, error) {
	n, err := w.d.out.Write(p)
	w.d.count(p, true)
	return n, err
}

func (drainWriter) Close() error { return nil }
