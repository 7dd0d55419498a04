// Package rawjson is the byte-level JSON scanner and splicer (scan.go),
// and keeps values read from agents' files and provider
// requests valid JSON: the one definition of what ctxd stores for a value
// that is empty, or is not JSON, where the canonical model needs a JSON
// value (a tool call's input, a json block). wire/anthropic, wire/openai
// and transcript use it.
package rawjson

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Value returns raw when it is a valid JSON value (a copy), {} when it is
// empty or only white space, else raw's bytes as a JSON string: the
// result is always valid JSON.
func Value(raw []byte) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("{}")
	}
	if json.Valid(raw) {
		return append(json.RawMessage(nil), raw...)
	}
	s, _ := json.Marshal(string(raw))
	return s
}

// Arguments returns the JSON value an OpenAI-style arguments string (JSON
// text) holds: {} when it is empty or only white space, the text itself
// when it is valid JSON, else the text as a JSON string.
func Arguments(args string) json.RawMessage {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	s, _ := json.Marshal(args)
	return s
}
