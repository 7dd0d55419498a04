package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/api"
)

// decode reads the request body into v strictly (DESIGN.md §7, STYLE.md):
// at most api.MaxRequestBytes (else too_large), a JSON content type when one
// is given (else unsupported_media_type), no unknown field (invalid, naming
// it), exactly one JSON value. An empty body is allowed only when
// allowEmpty (v keeps its zero value). Nothing has been called on the engine
// yet, so a failure here changes nothing.
func decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != api.ContentTypeJSON {
			return api.Errorf(api.UnsupportedMediaType, "", "request body must be %s, not %q", api.ContentTypeJSON, ct)
		}
	}
	if r.ContentLength > api.MaxRequestBytes {
		return tooLarge(r.ContentLength)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxRequestBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge(-1)
		}
		return fmt.Errorf("read request body: %w", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return api.Errorf(api.Invalid, "", "request body is empty; a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, body)
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.Errorf(api.Invalid, "", "request body must hold exactly one JSON value; more follows at byte %d", dec.InputOffset())
	}
	return nil
}

func tooLarge(n int64) error {
	if n > 0 {
		return api.Errorf(api.TooLarge, "", "request body is %d bytes, more than the limit of %d; nothing was stored", n, api.MaxRequestBytes)
	}
	return api.Errorf(api.TooLarge, "", "request body exceeds the limit of %d bytes; nothing was stored", api.MaxRequestBytes)
}

// decodeError turns encoding/json's errors into invalid errors naming the
// field (its JSON path, e.g. "messages.0.role") and the byte offset.
func decodeError(err error, body []byte) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn):
		return api.Errorf(api.Invalid, "", "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return api.Errorf(api.Invalid, "", "request body must be a JSON object, not %s", typ.Value)
		}
		return api.Errorf(api.Invalid, field, "%s: cannot be a JSON %s (want %s), at byte %d", field, typ.Value, typ.Type, typ.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return api.Errorf(api.Invalid, "", "malformed JSON: the body ends after %d bytes, in the middle of a value", len(body))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return api.Errorf(api.Invalid, name, "unknown field %q", name)
	}
	// Errors from a type's own UnmarshalJSON (time.Time, json.RawMessage)
	// carry no field; their text names the value.
	return api.Errorf(api.Invalid, "", "invalid request body: %v", err)
}
