package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/ctxd/ctxd/api"
)

// ToAPIError returns the api error that answers err (STYLE.md habit 1).
// Errors carry their code from where they are made (api.ErrorCoder): an
// *api.Error, and the sentinel errors of engine, checkpoint, artifacts,
// internal/store and summarizer — so this is no table of other packages'
// errors. What is left here is the caller's own context:
//
//	the first api.ErrorCoder of err's chain → its answer (api.AsAPIError)
//	context.DeadlineExceeded              → timeout
//	context.Canceled                      → unavailable
//	anything else                         → internal, "internal error"
//
// The second result says whether the error is the daemon's fault (internal)
// and its details belong in the log only.
func ToAPIError(err error) (*api.Error, bool) {
	if ae, ok := api.AsAPIError(err); ok {
		return ae, ae.Code == api.Internal
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &api.Error{Code: api.Timeout, Message: "the request did not finish in its time limit"}, false
	case errors.Is(err, context.Canceled):
		return &api.Error{Code: api.Unavailable, Message: "the request was cancelled"}, false
	}
	return &api.Error{Code: api.Internal, Message: "internal error; the details are in ctxd's log"}, true
}

// writeError answers err with its status and the api.ErrorEnvelope. An
// internal error is logged with its details, which the client never sees.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae, internal := ToAPIError(err)
	status := api.HTTPStatus(ae.Code)
	// A provider's error text reaches clients inside upstream errors; the
	// summarizer redacted it already, this is the last line of defense.
	red := *ae
	red.Message = s.red.String(ae.Message)
	ae = &red
	err = s.red.Error(err)
	switch {
	case internal:
		s.log.Error("request failed", attrMethod, r.Method, attrPath, r.URL.Path, attrErr, err)
	case errors.Is(err, context.Canceled):
		s.log.Debug("request cancelled", attrMethod, r.Method, attrPath, r.URL.Path)
	default:
		s.log.Debug("request refused", attrMethod, r.Method, attrPath, r.URL.Path, attrCode, ae.Code, attrErr, ae.Message)
	}
	if status == http.StatusServiceUnavailable {
		// Every unavailable answer is worth a retry shortly: a queue
		// full, a stream electing its leader, a node stopping (another
		// node behind the load balancer takes the retry).
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	writeJSON(w, status, api.ErrorEnvelope{Error: ae})
}

// retryAfterSeconds is the Retry-After of a 503: about a leader election.
const retryAfterSeconds = "2"

// writeJSON encodes v as the response body with status. Encoding is done
// before the header is written, so a value that cannot be encoded is a 500
// with the envelope rather than a truncated 200.
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := responseBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer putResponseBuffer(buf)
	if err := encodeJSONTo(buf, v); err != nil {
		slog.Default().Error("encode response", attrErr, err)
		status = http.StatusInternalServerError
		buf.Reset()
		_ = encodeJSONTo(buf, api.ErrorEnvelope{Error: &api.Error{Code: api.Internal, Message: "internal error; the details are in ctxd's log"}})
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// responseBuffers holds the buffers writeJSON encodes answers into. Each
// pre-send read answers with a whole assembled context (tens to hundreds of
// KB); encoded into a fresh buffer that doubles as it grows, those answers were
// over a third of the daemon's allocation in the 500-agent run, and the garbage
// collector's work competed with appends for the CPU (docs/performance.md
// "Append p99").
var responseBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledResponse bounds, in bytes, the capacity of a buffer put back in
// responseBuffers: a rare huge answer's buffer is left to the collector
// rather than held by the pool.
const maxPooledResponse = 1 << 20

func putResponseBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledResponse {
		responseBuffers.Put(b)
	}
}

// encodeJSON is v as compact JSON with a trailing newline and without
// HTML escaping: the context formats carry code and logs, where "<", ">" and
// "&" stay literal (as in history.Encode), and the same value always
// encodes to the same bytes.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := encodeJSONTo(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encodeJSONTo appends encodeJSON's bytes of v to buf; on an error buf may
// hold part of them.
func encodeJSONTo(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Log attribute keys (STYLE.md: litestream's constants).
const (
	attrMethod  = "method"
	attrPath    = "path"
	attrErr     = "err"
	attrCode    = "code"
	attrSession = "session"
)
