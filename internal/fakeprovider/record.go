package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Normalized is a Messages request reduced to what the prompt cache sees,
// with every cache_control marker removed and each field in canonical JSON
// (keys sorted): System and Tools whole, Messages one entry per message.
type Normalized struct {
	System, Tools []byte
	Messages      [][]byte
}

// Normalize returns body's Normalized form. The body is an Anthropic Messages
// request (system, tools, messages), a Chat Completions request (tools,
// messages) or a Responses request (instructions as System, tools, input
// items as Messages). It fails when body is not a JSON object or its
// conversation is not an array.
func Normalize(body []byte) (Normalized, error) {
	var f struct {
		System       json.RawMessage   `json:"system"`
		Instructions json.RawMessage   `json:"instructions"`
		Tools        json.RawMessage   `json:"tools"`
		Messages     []json.RawMessage `json:"messages"`
		Input        []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return Normalized{}, fmt.Errorf("fakeprovider: normalize request: %w", err)
	}
	if f.System == nil {
		f.System = f.Instructions
	}
	if f.Messages == nil {
		f.Messages = f.Input
	}
	n := Normalized{System: normalizeMarkers(f.System), Tools: normalizeMarkers(f.Tools)}
	for _, m := range f.Messages {
		n.Messages = append(n.Messages, normalizeMarkers(m))
	}
	return n, nil
}

// Extends reports whether next continues prev as the prompt cache needs:
// the same system prompt and tools, and prev's messages a prefix of next's,
// all compared with cache_control markers removed. It returns nil, or an
// error naming the first difference (field, message index).
func Extends(prev, next []byte) error {
	a, err := Normalize(prev)
	if err != nil {
		return err
	}
	b, err := Normalize(next)
	if err != nil {
		return err
	}
	if !bytes.Equal(a.System, b.System) {
		return fmt.Errorf("system prompt changed")
	}
	if !bytes.Equal(a.Tools, b.Tools) {
		return fmt.Errorf("tools changed")
	}
	if len(b.Messages) < len(a.Messages) {
		return fmt.Errorf("messages shrank from %d to %d", len(a.Messages), len(b.Messages))
	}
	for i := range a.Messages {
		if !bytes.Equal(a.Messages[i], b.Messages[i]) {
			return fmt.Errorf("messages.%d differs: %.200s… became %.200s…", i, a.Messages[i], b.Messages[i])
		}
	}
	return nil
}

// CheckChain checks that each request of reqs Extends the one before it
// (for a sequence of one conversation's requests, e.g. Messages(true) of one
// session). It returns nil or an error naming the pair (by Seq) that breaks
// the chain.
func CheckChain(reqs []Request) error {
	for i := 1; i < len(reqs); i++ {
		if err := Extends(reqs[i-1].Body, reqs[i].Body); err != nil {
			return fmt.Errorf("request %d does not extend request %d: %w", reqs[i].Seq, reqs[i-1].Seq, err)
		}
	}
	return nil
}
