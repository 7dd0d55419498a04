package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"testing"
)

func TestCodeStatusTable(t *testing.T) {
	want := map[string]int{
		Invalid:              400,
		Unauthorized:         401,
		Forbidden:            403,
		NotFound:             404,
		MethodNotAllowed:     405,
		RequestTimeout:       408,
		Conflict:             409,
		TooLarge:             413,
		UnsupportedMediaType: 415,
		HeaderTooLarge:       431,
		Internal:             500,
		Upstream:             502,
		Unavailable:          503,
		Timeout:              504,
		InsufficientStorage:  507,
	}
	if len(Codes()) != len(want) || len(codeStatus) != len(want) {
		t.Fatalf("Codes() has %d codes, table %d, want %d", len(Codes()), len(codeStatus), len(want))
	}
	seen := map[int]string{}
	for _, code := range Codes() {
		t.Run(code, func(t *testing.T) {
			st := HTTPStatus(code)
			if st != want[code] {
				t.Errorf("HTTPStatus(%q) = %d, want %d", code, st, want[code])
			}
			if back := CodeFromStatus(st); back != code {
				t.Errorf("CodeFromStatus(HTTPStatus(%q)) = %q", code, back)
			}
			if other, dup := seen[st]; dup {
				t.Errorf("status %d used by %q and %q", st, other, code)
			}
			seen[st] = code
		})
	}
}

func TestCodeFromStatusOutsideTable(t *testing.T) {
	tests := []struct {
		name   string
		status int
		want   string
	}{
		{"ok", 200, ""},
		{"no content", 204, ""},
		{"redirect", 302, ""},
		{"teapot", http.StatusTeapot, Invalid},
		{"too many requests", 429, Invalid},
		{"not implemented", 501, Internal},
		{"odd 5xx", 599, Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CodeFromStatus(tt.status); got != tt.want {
				t.Errorf("CodeFromStatus(%d) = %q, want %q", tt.status, got, tt.want)
			}
		})
	}
	if got := HTTPStatus("no_such_code"); got != 500 {
		t.Errorf("HTTPStatus(unknown) = %d, want 500", got)
	}
	if got := HTTPStatus(""); got != 500 {
		t.Errorf("HTTPStatus(\"\") = %d, want 500", got)
	}
}

func TestErrorCode(t *testing.T) {
	nf := Errorf(NotFound, "id", "session %q does not exist", "s1")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("boom"), Internal},
		{"api error", nf, NotFound},
		{"wrapped once", fmt.Errorf("engine: %w", nf), NotFound},
		{"wrapped twice", fmt.Errorf("server: %w", fmt.Errorf("engine: %w", nf)), NotFound},
		{"joined", errors.Join(errors.New("other"), nf), NotFound},
		{"empty code", &Error{Message: "x"}, Internal},
		{"deadline", fmt.Errorf("summarize: %w", context.DeadlineExceeded), Timeout},
		{"canceled", context.Canceled, Internal},
		{"api error wins over deadline", Errorf(Upstream, "", "all bindings failed: %w", context.DeadlineExceeded), Upstream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorCode(tt.err); got != tt.want {
				t.Errorf("ErrorCode(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorf(t *testing.T) {
	e := Errorf(Invalid, "messages[1].tool_call_id", "no open tool call %q: %w", "c9", fs.ErrNotExist)
	if e.Code != Invalid || e.Field != "messages[1].tool_call_id" {
		t.Fatalf("got %+v", e)
	}
	if want := `no open tool call "c9": file does not exist`; e.Error() != want || e.Message != want {
		t.Errorf("Error() = %q, want %q", e.Error(), want)
	}
	if !errors.Is(e, fs.ErrNotExist) {
		t.Error("errors.Is does not reach the %w cause")
	}
	if plain := Errorf(NotFound, "", "gone"); plain.Unwrap() != nil {
		t.Errorf("Unwrap of an error without %%w = %v, want nil", plain.Unwrap())
	}
	if got := (&Error{Code: Conflict}).Error(); got != "ctxd: conflict" {
		t.Errorf("Error() without message = %q", got)
	}
	if got := ErrorMessage(fmt.Errorf("x: %w", e)); got != e.Message {
		t.Errorf("ErrorMessage = %q", got)
	}
	if got := ErrorMessage(errors.New("plain")); got != "plain" {
		t.Errorf("ErrorMessage(plain) = %q", got)
	}
	if got := ErrorMessage(nil); got != "" {
		t.Errorf("ErrorMessage(nil) = %q", got)
	}
}

func TestErrorEnvelopeJSON(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"with field", Errorf(Invalid, "context_limit", "model %q is not in the catalog: give context_limit", "m"),
			`{"error":{"code":"invalid","message":"model \"m\" is not in the catalog: give context_limit","field":"context_limit"}}`},
		{"no field", Errorf(NotFound, "", "no session %q", "s"),
			`{"error":{"code":"not_found","message":"no session \"s\""}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(ErrorEnvelope{Error: tt.err})
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
			var back ErrorEnvelope
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Error.Code != tt.err.Code || back.Error.Message != tt.err.Message || back.Error.Field != tt.err.Field {
				t.Errorf("round trip: %+v, want %+v", back.Error, tt.err)
			}
		})
	}
}

// TestCodedErrorsCarryTheirAnswer: a sentinel made with NewCoded answers
// its code with the whole text of the error wrapping it, or what Answer
// makes; Under keeps errors.Is to its parent; the first coder of a chain
// answers (the outermost, where the error was made); an error carrying no
// code has none.
func TestCodedErrorsCarryTheirAnswer(t *testing.T) {
	parent := NewCoded(Conflict, "conflict")
	child := NewCoded(Conflict, "busy").Under(parent).Answer(func(error) *Error {
		return &Error{Code: Conflict, Message: "busy, try later"}
	})
	if child.Error() != "conflict: busy" || !errors.Is(child, parent) || errors.Is(parent, child) {
		t.Fatalf("child %q: Is parent %v", child.Error(), errors.Is(child, parent))
	}
	for _, c := range []struct {
		err  error
		code string
		msg  string
	}{
		{fmt.Errorf("session %q: %w", "x", parent), Conflict, `session "x": conflict`},
		{fmt.Errorf("compact: %w", child), Conflict, "busy, try later"},
		{fmt.Errorf("%w: %w", NewCoded(NotFound, "gone"), parent), NotFound, "gone: conflict"},
		{errors.Join(errors.New("plain"), fmt.Errorf("wrapped: %w", NewCoded(Timeout, "late"))), Timeout, "plain\nwrapped: late"},
		{fmt.Errorf("outer: %w", Errorf(Forbidden, "f", "no")), Forbidden, "no"},
	} {
		ae, ok := AsAPIError(c.err)
		if !ok || ae.Code != c.code || ae.Message != c.msg {
			t.Errorf("AsAPIError(%q) = %+v, %v; want %s %q", c.err, ae, ok, c.code, c.msg)
		}
	}
	for _, err := range []error{nil, errors.New("plain"), fmt.Errorf("x: %w", context.Canceled)} {
		if ae, ok := AsAPIError(err); ok {
			t.Errorf("AsAPIError(%v) = %+v, want none", err, ae)
		}
	}
}
