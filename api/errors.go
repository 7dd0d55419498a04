package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Error codes. Each maps to exactly one HTTP status and back (HTTPStatus,
// CodeFromStatus); the server answers every failure with one of them in an
// ErrorEnvelope, and the Client turns that back into an *Error, so
// ErrorCode(err) is the same in-process and over the socket (STYLE.md
// habit 1).
const (
	// Invalid (400): bad input — malformed JSON, an unknown field, a value
	// out of range, a tool result for an unknown call. Nothing was stored.
	Invalid = "invalid"
	// Unauthorized (401): TCP without a valid bearer token.
	Unauthorized = "unauthorized"
	// Forbidden (403): the peer's uid is not allowed, or the request
	// carries Origin, Referer or a foreign Host (docs/design.md §8b).
	Forbidden = "forbidden"
	// NotFound (404): no such session, artifact or route.
	NotFound = "not_found"
	// MethodNotAllowed (405): the route exists with other methods.
	MethodNotAllowed = "method_not_allowed"
	// RequestTimeout (408): the request body arrived too slowly
	// (daemon.limits.body_timeout_ms and body_min_rate); the connection
	// is closed. Nothing was stored.
	RequestTimeout = "request_timeout"
	// Conflict (409): the request conflicts with the session's state — the
	// id of a new session exists, or a manual compaction while a tool round
	// is open ("Not compacting now: a tool call is still waiting on its
	// result.", docs/design.md §5.1). Retry once the state changed.
	Conflict = "conflict"
	// TooLarge (413): the body exceeds MaxRequestBytes, or one append does
	// not fit one transaction. Nothing was stored.
	TooLarge = "too_large"
	// HeaderTooLarge (431): the request line and headers exceed
	// daemon.limits.header_bytes. Nothing was done.
	HeaderTooLarge = "header_too_large"
	// UnsupportedMediaType (415): a request body that is not
	// ContentTypeJSON.
	UnsupportedMediaType = "unsupported_media_type"
	// Internal (500): anything else; the details are in the daemon's log.
	Internal = "internal"
	// InsufficientStorage (507): the file system of the data directory has
	// less free space than the daemon keeps (storage.min_free_bytes), so
	// appends, new sessions and compactions are refused; reads, contexts
	// and deletions still work. Nothing was stored. Retry once space was
	// freed (docs/operating.md "Disk full").
	InsufficientStorage = "insufficient_storage"
	// Upstream (502): every summarizer binding failed (docs/design.md §5.5);
	// the message says how each one failed.
	Upstream = "upstream"
	// Unavailable (503): the daemon cannot take the request now — the
	// compaction queue is full, the daemon is shutting down, or (client
	// side) it cannot be reached at all.
	Unavailable = "unavailable"
	// Timeout (504): the work did not finish in its time limit (a
	// summarizer timeout, docs/design.md §5.4), or a context deadline passed.
	Timeout = "timeout"
)

// codeStatus is the one table of code ↔ HTTP status. It is a bijection:
// CodeFromStatus(HTTPStatus(c)) == c for every code.
var codeStatus = map[string]int{
	Invalid:              http.StatusBadRequest,
	Unauthorized:         http.StatusUnauthorized,
	Forbidden:            http.StatusForbidden,
	NotFound:             http.StatusNotFound,
	MethodNotAllowed:     http.StatusMethodNotAllowed,
	RequestTimeout:       http.StatusRequestTimeout,
	Conflict:             http.StatusConflict,
	TooLarge:             http.StatusRequestEntityTooLarge,
	UnsupportedMediaType: http.StatusUnsupportedMediaType,
	HeaderTooLarge:       http.StatusRequestHeaderFieldsTooLarge,
	Internal:             http.StatusInternalServerError,
	InsufficientStorage:  http.StatusInsufficientStorage,
	Upstream:             http.StatusBadGateway,
	Unavailable:          http.StatusServiceUnavailable,
	Timeout:              http.StatusGatewayTimeout,
}

var statusCode = func() map[int]string {
	m := make(map[int]string, len(codeStatus))
	for c, s := range codeStatus {
		m[s] = c
	}
	return m
}()

// Codes returns every error code, in ascending order of HTTP status. The
// slice is new on each call.
func Codes() []string {
	return []string{
		Invalid, Unauthorized, Forbidden, NotFound, MethodNotAllowed,
		RequestTimeout, Conflict, TooLarge, UnsupportedMediaType, HeaderTooLarge, Internal, Upstream,
		Unavailable, Timeout, InsufficientStorage,
	}
}

// HTTPStatus returns the HTTP status of an error code: the table above; an
// unknown code (including "") is 500, like Internal.
func HTTPStatus(code string) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// CodeFromStatus returns the error code of an HTTP status: the table above
// for the statuses it names; otherwise Invalid for any other 4xx, Internal
// for any other 5xx, and "" for a status that is not an error (< 400).
// The Client uses it when an error body carries no code.
func CodeFromStatus(status int) string {
	if c, ok := statusCode[status]; ok {
		return c
	}
	switch {
	case status >= 400 && status < 500:
		return Invalid
	case status >= 500:
		return Internal
	}
	return ""
}

// Error is a failure with a code from the table, a message for people, and
// optionally the request field it concerns. The server sends it inside an
// ErrorEnvelope; the Client returns it as *Error.
type Error struct {
	// Code is one of the codes above.
	Code string `json:"code"`
	// Message is one lower-case line saying what went wrong, naming the
	// offending value.
	Message string `json:"message"`
	// Field is the request field at fault as a path into the request body,
	// e.g. "context_limit" or "messages[2].content[0].input"; empty when
	// no one field is.
	Field string `json:"field,omitempty"`

	// cause is the error the message was made from, for errors.Is/As on
	// the client side (a dial error); never encoded.
	cause error
	// retryAfter is the response's Retry-After, when it had one; never
	// encoded.
	retryAfter time.Duration
}

// Error returns the message, or the code when there is no message.
func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	if e.Code != "" {
		return "ctxd: " + e.Code
	}
	return "ctxd: error"
}

// Unwrap returns the error the message was made from, if any (the causes
// that Errorf's %w verbs named).
func (e *Error) Unwrap() error { return e.cause }

// Errorf returns an *Error with the code, the field (may be empty) and a
// message formatted like fmt.Errorf. Errors named by %w verbs stay
// reachable through errors.Is and errors.As.
func Errorf(code, field, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Code: code, Message: err.Error(), Field: field}
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.cause = err
	}
	return e
}

// ErrorCode returns the code of err: "" for nil; the Code of the first
// *Error in err's chain (errors.As), Internal if that code is empty;
// Timeout for a context.DeadlineExceeded; Internal for anything else. It
// works the same on errors from the engine in-process and on errors the
// Client returns.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		if e.Code == "" {
			return Internal
		}
		return e.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Timeout
	}
	return Internal
}

// ErrorMessage returns the message of the first *Error in err's chain, or
// err.Error() for any other error, or "" for nil. A server uses it with
// ErrorCode; for Internal errors it should send a generic message instead
// and log the details.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Message
	}
	return err.Error()
}

// ErrorEnvelope is the JSON body of every error response:
// {"error": {"code": "...", "message": "...", "field": "..."}}.
type ErrorEnvelope struct {
	Error *Error `json:"error"`
}

// ErrorCoder is an error that carries the api error it answers as from
// where it is made, so the daemon needs no table of its own mapping other
// packages' errors to codes (the pattern of Ben Johnson's WTF Dial): the
// sentinel errors of the engine, the stores and the summarizer are
// *CodedErrors, and error types that refine one (a field, a disk's
// figures) implement it themselves. *Error implements it too.
type ErrorCoder interface {
	// APIError returns the api error to answer for err, an error whose
	// chain (errors.As) holds the receiver.
	APIError(err error) *Error
}

// APIError returns e itself: an *Error is its own answer.
func (e *Error) APIError(error) *Error { return e }

// AsAPIError returns the api error err carries: that of the first
// ErrorCoder in err's chain (errors.As order: err, then what it wraps,
// depth first), false when it carries none (nil, a context error, a
// failure no package gave a code to).
func AsAPIError(err error) (*Error, bool) {
	var c ErrorCoder
	if err == nil || !errors.As(err, &c) {
		return nil, false
	}
	ae := c.APIError(err)
	if ae == nil {
		return nil, false
	}
	return ae, true
}

// CodedError is an error value that carries its Code: the sentinel errors
// of ctxd's packages are made with NewCoded, compared by identity like
// errors.New's values (errors.Is), and answered through ErrorCoder.
type CodedError struct {
	code   string
	text   string
	parent error
	answer func(err error) *Error
}

// NewCoded returns a sentinel error with text answering as code: the
// answer's message is the whole text of the error that wraps it.
func NewCoded(code, text string) *CodedError {
	return &CodedError{code: code, text: text}
}

// Under returns a copy of e that wraps parent (errors.Is(e, parent) holds)
// and whose text is parent's, ": ", then e's, as fmt.Errorf("%w: %s")
// would make it.
func (e *CodedError) Under(parent error) *CodedError {
	c := *e
	c.parent = parent
	c.text = parent.Error() + ": " + e.text
	return &c
}

// Answer returns a copy of e whose answer f makes from the whole error
// (err, whose chain holds e): to cut the sentinel's own words from the
// message, name a field, or give a fixed sentence. f's *Error should carry
// e's code.
func (e *CodedError) Answer(f func(err error) *Error) *CodedError {
	c := *e
	c.answer = f
	return &c
}

// Error returns the sentinel's text.
func (e *CodedError) Error() string { return e.text }

// Unwrap returns the parent Under gave, if any.
func (e *CodedError) Unwrap() error { return e.parent }

// Code returns the code e answers as.
func (e *CodedError) Code() string { return e.code }

// APIError returns the answer for err: the one Answer set, else e's code
// with err's whole text as the message.
func (e *CodedError) APIError(err error) *Error {
	if e.answer != nil {
		return e.answer(err)
	}
	return &Error{Code: e.code, Message: err.Error()}
}
