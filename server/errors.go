package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/store"
	"github.com/ctxd/ctxd/summarizer"
	"github.com/ctxd/ctxd/trigger"
)

// ToAPIError is the one mapping from what the engine (and the stores
// behind it) returns to an api error (STYLE.md habit 1):
//
//	*api.Error                          → itself
//	engine.ErrNotFound, artifacts.ErrNotFound → not_found
//	engine.ErrInvalid, *engine.FieldError → invalid, Field set
//	artifacts.ErrInvalidID              → invalid, field "id"
//	engine.ErrExists, engine.ErrConflict → conflict (an open tool round
//	                                       answers exactly trigger.NotCompactingOpenRound)
//	checkpoint.ErrTooLarge, store.ErrTooLarge → too_large
//	store.ErrNoSpace                    → insufficient_storage
//	engine.ErrUnavailable, checkpoint.ErrClosed, context.Canceled → unavailable
//	checkpoint.ErrUnavailable (storage unreachable) → unavailable, its text
//	checkpoint.ErrUncertain (a write not acknowledged) → timeout, saying it
//	                                       may have been stored
//	summarizer.ErrAllBindingsFailed     → upstream
//	context.DeadlineExceeded            → timeout
//	anything else                       → internal, "internal error"
//
// The second result says whether the error is the daemon's fault (internal)
// and its details belong in the log only.
func ToAPIError(err error) (*api.Error, bool) {
	if ae, ok := errors.AsType[*api.Error](err); ok {
		return ae, ae.Code == api.Internal
	}
	switch {
	case errors.Is(err, engine.ErrInvalid) || errors.Is(err, checkpoint.ErrInvalid):
		field := ""
		if fe, ok := errors.AsType[*engine.FieldError](err); ok {
			field = fe.Field
		}
		return &api.Error{Code: api.Invalid, Field: field, Message: invalidMessage(err, field)}, false
	case errors.Is(err, artifacts.ErrInvalidID):
		return &api.Error{Code: api.Invalid, Field: "id", Message: "id: " + err.Error()}, false
	case errors.Is(err, engine.ErrNotFound), errors.Is(err, checkpoint.ErrNotFound):
		return &api.Error{Code: api.NotFound, Message: err.Error()}, false
	case errors.Is(err, artifacts.ErrNotFound):
		return &api.Error{Code: api.NotFound, Message: "no artifact has this id"}, false
	case errors.Is(err, engine.ErrExists), errors.Is(err, checkpoint.ErrExists):
		return &api.Error{Code: api.Conflict, Message: err.Error()}, false
	case errors.Is(err, engine.ErrOpenRound):
		// The exact sentence of docs/design.md §5.1, however the error was wrapped.
		return &api.Error{Code: api.Conflict, Message: trigger.NotCompactingOpenRound}, false
	case errors.Is(err, engine.ErrConflict):
		return &api.Error{Code: api.Conflict, Message: strings.TrimPrefix(err.Error(), engine.ErrConflict.Error()+": ")}, false
	case errors.Is(err, checkpoint.ErrTooLarge), errors.Is(err, store.ErrTooLarge):
		return &api.Error{Code: api.TooLarge, Message: "the messages take more than one append may hold (about 1.1 MB as stored: docs/api.md \"Limits\"); split them into smaller appends; nothing was stored: " + err.Error()}, false
	case errors.Is(err, store.ErrNoSpace):
		msg := "the disk is full: ctxd refuses writes below its free-space reserve; nothing was stored"
		if se, ok := errors.AsType[*store.SpaceError](err); ok {
			msg = se.Error() + "; nothing was stored"
		}
		return &api.Error{Code: api.InsufficientStorage, Message: msg}, false
	case errors.Is(err, engine.ErrUnavailable):
		return &api.Error{Code: api.Unavailable, Message: strings.TrimPrefix(err.Error(), engine.ErrUnavailable.Error()+": ")}, false
	case errors.Is(err, checkpoint.ErrUncertain):
		// Before the time-out case: the storage's own words, and what the
		// client can do about a write that may have happened.
		return &api.Error{Code: api.Timeout, Message: "the write may have been stored: " + after(err.Error(), checkpoint.ErrUncertain.Error()+": ") +
			"; retry with the same Idempotency-Key header: if it was stored, the retry returns the first answer and stores nothing"}, false
	case errors.Is(err, checkpoint.ErrUnavailable):
		// The backend's own words ("storage: nats: no servers available …"),
		// not the time limit the request would otherwise run into.
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, checkpoint.ErrUnavailable.Error()+": "); ok {
			msg = after
		}
		return &api.Error{Code: api.Unavailable, Message: msg}, false
	case errors.Is(err, checkpoint.ErrClosed), errors.Is(err, store.ErrClosed):
		return &api.Error{Code: api.Unavailable, Message: "ctxd is shutting down"}, false
	case errors.Is(err, summarizer.ErrAllBindingsFailed):
		return &api.Error{Code: api.Upstream, Message: err.Error()}, false
	case errors.Is(err, context.DeadlineExceeded):
		return &api.Error{Code: api.Timeout, Message: "the request did not finish in its time limit"}, false
	case errors.Is(err, context.Canceled):
		return &api.Error{Code: api.Unavailable, Message: "the request was cancelled"}, false
	}
	return &api.Error{Code: api.Internal, Message: "internal error; the details are in ctxd's log"}, true
}

// after returns s after the first sep, or s when sep is not in it.
func after(s, sep string) string {
	if _, a, ok := strings.Cut(s, sep); ok {
		return a
	}
	return s
}

// invalidMessage is the message of an invalid-input error: the field, then
// the cause without the "invalid: " sentinel text the engine wraps in. A
// cause that already names the field as "FIELD: " (a configuration
// problem, "config: session overlay:3:1: summarizer.bindings: …") is not
// prefixed again.
func invalidMessage(err error, field string) string {
	msg := err.Error()
	if fe, ok := errors.AsType[*engine.FieldError](err); ok && fe.Err != nil {
		msg = fe.Err.Error()
	}
	msg = strings.TrimPrefix(msg, engine.ErrInvalid.Error()+": ")
	if field != "" && !strings.HasPrefix(msg, field) && !strings.Contains(msg, " "+field+": ") {
		msg = field + ": " + msg
	}
	return msg
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
