package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// AnswerSig identifies an answer as the client sends it back (docs/design.md
// §10): its tool
// call ids and the digest of its text. Thinking and byte layout are left
// out (a client re-encodes what it received).
type AnswerSig struct {
	ToolCalls []string `json:"tool_calls,omitempty"`
	Text      string   `json:"text"`
	// Inputs are the digests of the tool calls' inputs, in order, in one
	// JSON form (InputDigest): a client that edited a call's input in its
	// history rewrote the answer, and its edit is sent, not ctxd's
	// record. Absent in records of an older ctxd (not compared then).
	Inputs []string `json:"inputs,omitempty"`
	// Norm is the digest of the text with whitespace runs as one space
	// and blank blocks left out: a client that re-flows the answer's text
	// still sends the answer (docs/design.md §10). Empty in a record
	// written before it existed: Text is compared then.
	Norm string `json:"norm,omitempty"`
}

// InputDigest is the digest of a tool call's input in one JSON form (keys
// sorted, no spacing): a client that re-encodes the input it received
// gives the same digest.
func InputDigest(in json.RawMessage) string {
	var v any
	b := []byte(in)
	if json.Unmarshal(in, &v) == nil {
		if c, err := json.Marshal(v); err == nil {
			b = c
		}
	}
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:8])
}

// SigOf is the signature of the answer m.
func SigOf(m history.Message) *AnswerSig {
	s := &AnswerSig{}
	h, n := sha256.New(), sha256.New()
	for _, b := range m.Content {
		switch b.Type {
		case history.BlockText:
			h.Write([]byte(b.Text))
			if t := strings.Join(strings.Fields(b.Text), " "); t != "" {
				n.Write([]byte(t))
				n.Write([]byte{0})
			}
		case history.BlockToolCall:
			s.ToolCalls = append(s.ToolCalls, b.ID)
			s.Inputs = append(s.Inputs, InputDigest(b.Input))
		}
	}
	s.Text = hex.EncodeToString(h.Sum(nil))[:32]
	s.Norm = hex.EncodeToString(n.Sum(nil))[:32]
	return s
}

// Equal reports whether the canonical assistant message m is the answer s
// (blank text blocks left out).
func (s *AnswerSig) Equal(m history.Message) bool {
	var nonEmpty []history.Block
	for _, b := range m.Content {
		if b.Type == history.BlockText && strings.TrimSpace(b.Text) == "" {
			continue
		}
		nonEmpty = append(nonEmpty, b)
	}
	o := SigOf(history.Message{Content: nonEmpty})
	text := o.Text == s.Text
	if s.Norm != "" {
		text = o.Norm == s.Norm
	}
	return text && slices.Equal(o.ToolCalls, s.ToolCalls) && (s.Inputs == nil || slices.Equal(o.Inputs, s.Inputs))
}
