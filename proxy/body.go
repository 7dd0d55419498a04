package proxy

import (
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/wire"
)

// request is a managed request body as the client sent it, read in one
// pass: the fields the proxy needs, and the byte range of the conversation
// ("messages", or the Responses API's "input") so the outgoing body can
// replace that value and keep every other byte.
type request struct {
	// Request is the body's scan (wire.Scan): its conversation's items
	// and where they lie, and the members ctxd reads.
	wire.Request
	d    dialect
	body []byte
	// buf is the pooled buffer body was read into (nil: not pooled); the
	// outgoing body holds it while it points into body.
	buf *bodybuf.Buf

	// marked[k], when k is in range: messages[k] holds a cache marker
	// (wire.Digests.Marked of this request); out of range: not known.
	marked []bool
	// fast[k], when k is in range: the fast hash of messages[k]'s bytes
	// (wire.Digests.Fast of this request), by which the client-bytes
	// indexes know the messages they indexed; nil: not known.
	fast []uint64
	// clientCompacting: the client is compacting its own conversation
	// (Codex's request_kind "compaction", or a trailing
	// compaction_trigger: responses.ClientCompacting); ctxd does not
	// compact for this request, before sending it nor on its refusal.
	clientCompacting bool
	// parsed is the append's reading of the client's new messages
	// (request.parse), kept for the client-bytes index (wire.Reading).
	parsed parsedMessages
}

// parsedMessages is the reading of messages[from:] of a Messages API
// request: message from+j read as msgs[ends[j-1]:ends[j]] (ends[-1]
// being 0).
type parsedMessages struct {
	from int
	msgs []history.Message
	ends []int
}

// parse is req.d.Parse(req.messages, from); for a dialect whose messages
// each read on their own (wire.EachParser: the Messages API) it keeps
// each message's reading, so the client-bytes index keys the new messages
// without decoding them again (wire.RenderRequest.Reading).
func (req *request) parse(from int) ([]history.Message, error) {
	each, ok := req.d.(wire.EachParser)
	if !ok {
		return req.d.Parse(req.Messages, from)
	}
	msgs, ends, err := each.ParseEach(req.Messages, from)
	if err != nil {
		return nil, err
	}
	// A copy of the list: the append may replace its messages (never
	// their blocks in place).
	req.parsed = parsedMessages{from: from, msgs: slices.Clone(msgs), ends: ends}
	return msgs, nil
}

// parseBody reads body, a request of the dialect d, in one pass
// (wire.Scan): a body whose syntax the scanner cannot follow is refused
// here, with an error wrapping wire.ErrBadRequest that names the field.
func parseBody(body []byte, d dialect) (*request, error) {
	w, err := wire.Scan(body, d)
	if err != nil {
		return nil, err
	}
	return &request{Request: *w, d: d, body: body}, nil
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
