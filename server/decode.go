package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/internal/netlimit"
)

// decodeOptions are the json/v2 semantics docs/api.md promises: member
// names match case-sensitively, a duplicated name anywhere in the body (a
// tool call's input too) and invalid UTF-8 (raw bytes or a lone surrogate
// escape such as \ud800) are errors, and so is an unknown member. These are
// v2's defaults except RejectUnknownMembers; they are spelled out so that a
// change of defaults cannot loosen them.
var decodeOptions = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsonv2.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// decode reads the request body into v strictly (docs/design.md §7, STYLE.md):
// at most api.MaxRequestBytes (else too_large), a JSON content type when one
// is given, with no charset or utf-8 (else unsupported_media_type, Field
// "Content-Type"; no Content-Type at all is read as JSON), exactly one JSON value decoded
// with decodeOptions; every problem is invalid with Field the JSON path of
// the offending value ("messages[2].content[0].text"); a top-level null is
// invalid, not an empty object. An empty body is
// allowed only when allowEmpty (v keeps its zero value). Nothing has been
// called on the engine yet, so a failure here changes nothing.
func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != api.ContentTypeJSON {
			return api.Errorf(api.UnsupportedMediaType, "Content-Type", "Content-Type: request body must be %s (charset utf-8 or none), not %q", api.ContentTypeJSON, ct)
		}
		// JSON is UTF-8 (RFC 8259 §8.1): a body declared in another
		// charset would be read as UTF-8 all the same, so it is refused.
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
			return api.Errorf(api.UnsupportedMediaType, "Content-Type", "Content-Type: charset %q: request bodies are UTF-8 JSON (send %s or %s; charset=utf-8)", cs, api.ContentTypeJSON, api.ContentTypeJSON)
		}
	}
	if r.ContentLength > api.MaxRequestBytes {
		return tooLarge(w, r, r.ContentLength)
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, api.MaxRequestBytes), r.ContentLength)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge(w, r, -1)
		}
		if errors.Is(err, netlimit.ErrBodyTimeout) {
			w.Header().Set("Connection", "close")
			return api.Errorf(api.RequestTimeout, "", "the request body arrived too slowly (daemon.limits.body_timeout_ms without bytes, or under daemon.limits.body_min_rate bytes/s after it); nothing was stored")
		}
		return fmt.Errorf("read request body: %w", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return api.Errorf(api.Invalid, "", "request body is empty; a JSON object is required")
	}
	// json/v2 (like encoding/json) leaves a struct untouched for a
	// top-level null, which would make `null` mean `{}`: every body is an
	// object (docs/api.md), so null is refused like any other non-object.
	if string(bytes.TrimSpace(body)) == "null" {
		return invalidAt("", "null is not a JSON object (send {} for no options)")
	}
	if err := jsonv2.Unmarshal(body, v, decodeOptions); err != nil {
		return decodeError(err, body)
	}
	return nil
}

// readBody reads body whole. With the request's Content-Length known
// (n > 0) the buffer is made that size at once, instead of io.ReadAll's
// doubling from 512 bytes, which allocated about twice every body (issue
// 19). n only sizes the buffer: what is read is what body yields.
func readBody(body io.Reader, n int64) ([]byte, error) {
	if n <= 0 || n > api.MaxRequestBytes {
		return io.ReadAll(body)
	}
	// MinRead spare bytes: ReadFrom meets EOF without growing the buffer.
	buf := bytes.NewBuffer(make([]byte, 0, n+bytes.MinRead))
	_, err := buf.ReadFrom(body)
	return buf.Bytes(), err
}

// drainLimit bounds how much of an oversized body the server still reads
// (and discards) before answering 413: a client that writes its whole body
// before reading the answer (Python's http.client, curl without
// Expect: 100-continue) would otherwise see a connection reset instead of
// the 413. 64 MiB is twice the limit: beyond it the connection is closed.
const drainLimit = 2 * api.MaxRequestBytes

// tooLarge is the too_large error of a body over the limit (n bytes, or -1
// when unknown). It first reads what is left of the body, up to drainLimit,
// so that the answer reaches a client still writing; the connection is
// closed after the answer.
func tooLarge(w http.ResponseWriter, r *http.Request, n int64) error {
	w.Header().Set("Connection", "close")
	// A client that sent Expect: 100-continue has not sent the body and
	// will not: there is nothing to drain.
	if n <= drainLimit && !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		// The MaxBytesReader of a read that hit the limit fails every later
		// read, so drain the connection's body itself.
		_, _ = io.CopyN(io.Discard, r.Body, drainLimit)
	}
	if n > 0 {
		return api.Errorf(api.TooLarge, "", "request body is %d bytes, more than the limit of %d; nothing was stored", n, api.MaxRequestBytes)
	}
	return api.Errorf(api.TooLarge, "", "request body exceeds the limit of %d bytes; nothing was stored", api.MaxRequestBytes)
}

// decodeError turns json/v2's errors into invalid errors whose Field is the
// JSON path of the problem ("messages[2].content[0].text") and whose
// message says what was expected in JSON terms, never a Go type name.
func decodeError(err error, body []byte) error {
	if syn, ok := errors.AsType[*jsontext.SyntacticError](err); ok {
		field := fieldPath(syn.JSONPointer)
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return invalidAt(field, "duplicate key %q (each key may appear once in an object)", syn.JSONPointer.LastToken())
		case syn.Err != nil && (strings.Contains(syn.Err.Error(), "invalid UTF-8") || strings.Contains(syn.Err.Error(), "surrogate")):
			return invalidAt(field, "invalid UTF-8 at byte %d: strings must be valid UTF-8 (a lone surrogate escape such as \\ud800 is not)", syn.ByteOffset)
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return api.Errorf(api.Invalid, "", "malformed JSON: the body ends after %d bytes, in the middle of a value", len(body))
		}
		return invalidAt(field, "malformed JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	}
	if sem, ok := errors.AsType[*jsonv2.SemanticError](err); ok {
		field := fieldPath(sem.JSONPointer)
		switch {
		case errors.Is(sem.Err, jsonv2.ErrUnknownName):
			return invalidAt(field, "unknown key %q", sem.JSONPointer.LastToken())
		case sem.GoType == reflect.TypeFor[time.Time]():
			return invalidAt(field, "must be a time in RFC 3339 form (\"2026-01-02T15:04:05Z\"), %s", timeReason(sem))
		case sem.GoType != nil:
			return invalidAt(field, "must be %s, not %s", jsonWant(sem.GoType), jsonValue(sem))
		}
		return invalidAt(field, "invalid value at byte %d", sem.ByteOffset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return api.Errorf(api.Invalid, "", "malformed JSON: the body ends after %d bytes, in the middle of a value", len(body))
	}
	return api.Errorf(api.Invalid, "", "invalid request body: %v", err)
}

// timeReason says why a JSON value is not an RFC 3339 time: a string that
// does not parse is quoted (cut to 40 bytes) with the parser's reason
// ("month out of range") or "not in that form"; any other JSON value is
// named by its kind ("not a number").
func timeReason(sem *jsonv2.SemanticError) string {
	pe, ok := errors.AsType[*time.ParseError](sem.Err)
	if !ok {
		return "not " + jsonValue(sem)
	}
	v := pe.Value
	if len(v) > 40 {
		v = strings.ToValidUTF8(v[:40], "") + "…"
	}
	why := strings.TrimPrefix(pe.Message, ": ")
	if why == "" {
		why = "not in that form"
	}
	return fmt.Sprintf("but %q is not one: %s", v, why)
}

// invalidAt is an invalid error for field (the body itself when "").
func invalidAt(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if field == "" {
		return api.Errorf(api.Invalid, "", "request body: %s", msg)
	}
	return api.Errorf(api.Invalid, field, "%s: %s", field, msg)
}

// fieldPath writes a JSON pointer ("/messages/2/content/0/text") as the path
// the engine's errors use ("messages[2].content[0].text"): array indexes in
// brackets, member names joined with dots.
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// jsonValue names the JSON value that did not fit: a short literal, else
// its kind.
func jsonValue(sem *jsonv2.SemanticError) string {
	if v := sem.JSONValue; len(v) > 0 && len(v) <= 40 {
		return string(v)
	}
	switch sem.JSONKind {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "this value"
}

// jsonWant says in JSON terms what a Go type accepts.
func jsonWant(t reflect.Type) string {
	if t == reflect.TypeFor[json.RawMessage]() {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map:
		return "an object of " + strings.TrimPrefix(jsonWant(t.Elem()), "a ") + " values"
	case reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonWant(t.Elem())
	}
	return "another kind of value"
}
