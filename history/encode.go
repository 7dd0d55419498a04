package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Encode returns the stable JSON encoding of m (docs/design.md §2, §4
// "Append-only"): the same message always encodes to the same bytes, so an
// assembled context is a byte-for-byte extension of the previous one.
//
// The encoding is compact JSON with the fields in declaration order and:
//   - Input, JSON and Raw (raw JSON values) compacted with json.Compact; their key
//     order and string escapes are kept as written, because they are what the
//     model produced and are replayed to it;
//   - Time in UTC (monotonic reading dropped), RFC 3339 with nanoseconds;
//   - no HTML escaping: '<', '>' and '&' are written as themselves, not as
//     \u003c…, in text and in raw values alike (code and logs are full of them;
//     escaping would change the bytes a model sees and inflate them);
//   - nil Content written as [] (so nil and empty encode alike);
//   - no trailing newline.
//
// Encode returns an error, and never silently rewrites content, when a string
// field holds invalid UTF-8 (encoding/json would replace it with U+FFFD) or
// Input or JSON is not valid JSON.
func Encode(m Message) ([]byte, error) {
	return AppendEncode(nil, m)
}

// AppendEncode appends Encode(m) to dst and returns the extended slice
// (dst unchanged on an error). dst is grown once, to about m's encoded
// size, before encoding: a message of tens of MB is not copied through
// buffers doubling on the way. Errors: as Encode's.
func AppendEncode(dst []byte, m Message) ([]byte, error) {
	m, err := canonical(m)
	if err != nil {
		return dst, err
	}
	w := appender{b: slices.Grow(dst, SizeHint(m))}
	enc := json.NewEncoder(&w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return dst, fmt.Errorf("history: encode message: %w", err)
	}
	return bytes.TrimSuffix(w.b, []byte("\n")), nil
}

// appender is an io.Writer appending to b.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// SizeHint is about the length of m's encoding, in bytes, and so about
// what m holds in memory: its strings and raw values as they are (escapes
// add a little), and the field names and punctuation around them.
func SizeHint(m Message) int {
	n := 128 + len(m.ToolCallID) + len(m.ToolName) + len(m.Model)
	for i := range m.Content {
		b := &m.Content[i]
		n += 96 + len(b.Text) + len(b.Signature) + len(b.Data) + len(b.ID) + len(b.Name) +
			len(b.Input) + len(b.MediaType) + len(b.Artifact) + len(b.JSON) + len(b.Raw)
	}
	return n
}

// Canonical returns m exactly as Decode(Encode(m)) gives it back: times in
// UTC, raw JSON values (tool-call inputs, json blocks) compacted, empty
// Content nil. Keep this form in memory, so what is sent from memory and
// what is rebuilt from the store after a restart are the same bytes
// (docs/design.md §8). Errors: as Encode's.
func Canonical(m Message) (Message, error) {
	m, err := canonical(m)
	if err != nil {
		return m, err
	}
	if len(m.Content) == 0 {
		m.Content = nil
	}
	return m, nil
}

// canonical returns a copy of m with times in UTC, nil Content replaced by an
// empty slice and raw JSON values compacted. It does not modify m's blocks.
func canonical(m Message) (Message, error) {
	if !m.Time.IsZero() {
		m.Time = m.Time.UTC()
	}
	if m.Content == nil {
		m.Content = []Block{}
	}
	if f, ok := invalidUTF8(&m); ok {
		return m, fmt.Errorf("history: encode message: %s: invalid UTF-8", f)
	}
	blocks := make([]Block, len(m.Content))
	copy(blocks, m.Content)
	for i := range blocks {
		b := &blocks[i]
		var err error
		if b.Input, err = compactRaw(b.Input); err != nil {
			return m, fmt.Errorf("history: encode message: content[%d].input: %w", i, err)
		}
		if b.JSON, err = compactRaw(b.JSON); err != nil {
			return m, fmt.Errorf("history: encode message: content[%d].json: %w", i, err)
		}
		if b.Raw, err = compactRaw(b.Raw); err != nil {
			return m, fmt.Errorf("history: encode message: content[%d].raw: %w", i, err)
		}
	}
	m.Content = blocks
	return m, nil
}

// compactRaw returns raw compacted; an empty value stays empty.
func compactRaw(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return raw, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if bytes.Equal(buf.Bytes(), raw) {
		return raw, nil
	}
	return buf.Bytes(), nil
}

// invalidUTF8 reports the first field of m holding invalid UTF-8, named as
// validation names it ("content[2].text").
func invalidUTF8(m *Message) (field string, bad bool) {
	for _, f := range []struct {
		name, v string
	}{
		{"role", string(m.Role)},
		{"tool_call_id", m.ToolCallID},
		{"tool_name", m.ToolName},
		{"model", m.Model},
	} {
		if !utf8.ValidString(f.v) {
			return f.name, true
		}
	}
	for i := range m.Content {
		if f, ok := blockInvalidUTF8(&m.Content[i]); ok {
			return fmt.Sprintf("content[%d].%s", i, f), true
		}
	}
	return "", false
}

func blockInvalidUTF8(b *Block) (field string, bad bool) {
	for _, f := range []struct {
		name, v string
	}{
		{"type", string(b.Type)},
		{"text", b.Text},
		{"signature", b.Signature},
		{"data", b.Data},
		{"id", b.ID},
		{"name", b.Name},
		{"phase", b.Phase},
		{"media_type", b.MediaType},
		{"artifact", b.Artifact},
	} {
		if !utf8.ValidString(f.v) {
			return f.name, true
		}
	}
	if !utf8.Valid(b.Input) {
		return "input", true
	}
	if !utf8.Valid(b.JSON) {
		return "json", true
	}
	if !utf8.Valid(b.Raw) {
		return "raw", true
	}
	return "", false
}

// Decode decodes one message encoded as JSON, strictly: the input must be
// valid UTF-8 holding exactly one JSON object; unknown fields, fields whose
// name differs in case from the encoding's ("Role"), duplicate fields and
// trailing data are rejected. Raw JSON values (Input, JSON) are compacted as
// Encode compacts them, an empty content array decodes to nil Content, and
// Time is in UTC, so Encode(Decode(Encode(m))) equals Encode(m) byte for byte.
//
// Decode checks the JSON shape only; use State.Check for the rules of
// docs/design.md §2.
func Decode(data []byte) (Message, error) {
	var m Message
	if !utf8.Valid(data) {
		return m, errors.New("history: decode message: invalid UTF-8")
	}
	if err := checkKeys(data); err != nil {
		return Message{}, fmt.Errorf("history: decode message: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Message{}, fmt.Errorf("history: decode message: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Message{}, errors.New("history: decode message: trailing data after the message")
	}
	if len(m.Content) == 0 {
		m.Content = nil
	}
	m, err := canonical(m)
	if err != nil {
		return Message{}, err
	}
	if len(m.Content) == 0 {
		m.Content = nil
	}
	return m, nil
}

// jsonKeys returns the exact JSON field names of struct type t.
func jsonKeys(t reflect.Type) map[string]bool {
	keys := make(map[string]bool, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}

var fieldSets = sync.OnceValue(func() [3]map[string]bool {
	return [3]map[string]bool{
		jsonKeys(reflect.TypeFor[Message]()),
		jsonKeys(reflect.TypeFor[Block]()),
		jsonKeys(reflect.TypeFor[Usage]()),
	}
})

// keyError is a field checkKeys rejects.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

// checkKeys walks the top of a message's JSON and rejects, naming the field's
// path, unknown fields and what encoding/json's DisallowUnknownFields lets
// through: a known name in another case, and a field given twice. Raw values
// (input, json) are not walked. Syntax and type errors are left to
// encoding/json, which reports them with an offset.
func checkKeys(data []byte) error {
	var ke *keyError
	if err := walkMessage(data); errors.As(err, &ke) {
		return ke
	}
	return nil
}

func walkMessage(data []byte) error {
	sets := fieldSets()
	dec := json.NewDecoder(bytes.NewReader(data))
	return walkObject(dec, "", sets[0], func(key, path string) error {
		switch key {
		case "content":
			return walkArray(dec, path, func(ipath string) error {
				return walkObject(dec, ipath, sets[1], nil)
			})
		case "usage":
			return walkObject(dec, path, sets[2], nil)
		}
		return skipValue(dec)
	})
}

// walkObject reads one object (or null) whose keys must be in known, and
// calls value for each key, which must consume the value; nil skips values.
func walkObject(dec *json.Decoder, path string, known map[string]bool, value func(key, path string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); ok && d != '{' {
		return errors.New("not an object")
	} else if !ok {
		return nil // a scalar: a type error encoding/json reports
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		p := key
		if path != "" {
			p = path + "." + key
		}
		if !known[key] {
			return &keyError{fmt.Sprintf("unknown field %q", p)}
		}
		if seen[key] {
			return &keyError{fmt.Sprintf("duplicate field %q", p)}
		}
		seen[key] = true
		if value == nil {
			err = skipValue(dec)
		} else {
			err = value(key, p)
		}
		if err != nil {
			return err
		}
	}
	_, err = dec.Token() // '}'
	return err
}

func walkArray(dec *json.Decoder, path string, elem func(path string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); ok && d != '[' {
		return errors.New("not an array")
	} else if !ok {
		return nil // a scalar or null: encoding/json reports the type
	}
	for i := 0; dec.More(); i++ {
		if err := elem(fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err = dec.Token() // ']'
	return err
}

func skipValue(dec *json.Decoder) error {
	var raw json.RawMessage
	return dec.Decode(&raw)
}
