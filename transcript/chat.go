package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/openai/chat"
)

// element is one value of a JSON array with its byte offset in the input.
type element struct {
	index int
	off   int64
	raw   json.RawMessage
}

// decodeArray splits the JSON array arr (found at byte offset base of the
// input) into its elements. A syntax error is a *MalformedError naming the
// offset in the input.
func decodeArray(arr []byte, base int64) ([]element, error) {
	dec := json.NewDecoder(bytes.NewReader(arr))
	bad := func(err error) error {
		off := dec.InputOffset()
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			off = syn.Offset
		}
		return &MalformedError{Offset: base + off, Err: err}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, bad(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, &MalformedError{Offset: base, Err: errors.New("expected a JSON array")}
	}
	var out []element
	for dec.More() {
		off := dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, bad(err)
		}
		// InputOffset points before the separating comma and spaces.
		for off < int64(len(arr)) && (arr[off] == ',' || arr[off] == ' ' || arr[off] == '\n' || arr[off] == '\r' || arr[off] == '\t') {
			off++
		}
		out = append(out, element{index: len(out), off: base + off, raw: raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad(err)
	}
	if rest := bytes.TrimSpace(arr[dec.InputOffset():]); len(rest) > 0 {
		return nil, &MalformedError{Offset: base + dec.InputOffset(), Err: errors.New("data after the JSON array")}
	}
	return out, nil
}

// badElement records an element that does not decode: counted under
// SkipMalformed, else an error naming its index and offset.
func badElement(t *Transcript, opts Options, what string, e element, err error) error {
	if opts.SkipMalformed {
		t.Skipped++
		return nil
	}
	return &MalformedError{Offset: e.off, Err: fmt.Errorf("%s %d: %w", what, e.index, err)}
}

// messagesArray returns the messages array of data — data itself when it is
// an array, else the "messages" (or, for a trajectory, "history") member of
// the object — with its offset and the object's "system" member.
func messagesArray(data []byte, member string) (arr []byte, base int64, system json.RawMessage, err error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	base = int64(len(data) - len(trimmed))
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return trimmed, base, nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		var syn *json.SyntaxError
		off := int64(0)
		if errors.As(err, &syn) {
			off = syn.Offset
		}
		return nil, 0, nil, &MalformedError{Offset: off, Err: err}
	}
	raw, ok := obj[member]
	if !ok {
		return nil, 0, nil, &MalformedError{Err: fmt.Errorf("no %q array", member)}
	}
	// RawMessage holds the member's exact bytes, so they can be found in
	// the input to report offsets into it.
	if i := bytes.Index(data, raw); i >= 0 {
		base = int64(i)
	}
	return raw, base, obj["system"], nil
}

// --- Anthropic Messages arrays ---

type anthMessage struct {
	Role    string           `json:"role"`
	Content json.RawMessage  `json:"content"`
	Model   string           `json:"model"`
	Usage   *anthropic.Usage `json:"usage"`
}

func importChat(format string, data []byte, opts Options) (*Transcript, error) {
	arr, base, system, err := messagesArray(data, "messages")
	if err != nil {
		return nil, err
	}
	elems, err := decodeArray(arr, base)
	if err != nil {
		return nil, err
	}
	b := newBuilder(format)
	if len(system) > 0 {
		if s, err := systemText(system); err == nil {
			b.addSystem(s)
		}
	}
	for _, e := range elems {
		var err error
		if format == FormatOpenAIChat {
			err = openAIAppend(b, e.raw)
		} else {
			err = anthropicAppend(b, e.raw)
		}
		if err != nil {
			if err := badElement(b.t, opts, "message", e, err); err != nil {
				return nil, err
			}
		}
	}
	return b.t, nil
}

// systemText reads a system prompt: a string or an array of text blocks.
func systemText(raw json.RawMessage) (string, error) {
	blocks, err := anthropic.DecodeContent(raw)
	if err != nil {
		return "", err
	}
	return anthropic.JoinText(blocks), nil
}

// anthropicAppend converts one Anthropic message; nothing changes on error.
func anthropicAppend(b *builder, raw json.RawMessage) error {
	var m anthMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	blocks, err := anthropic.DecodeContent(m.Content)
	if err != nil {
		return err
	}
	switch m.Role {
	case "user":
		results, rest, err := anthropic.SplitUser(blocks)
		if err != nil {
			return err
		}
		for _, r := range results {
			b.tool(r.CallID, "", r.Content, r.IsError, zeroTime)
		}
		b.user(rest, zeroTime)
	case "assistant":
		b.assistant(history.Message{Content: anthropic.AssistantBlocks(blocks), Model: m.Model, Usage: m.Usage.Canonical()})
	case "system":
		b.addSystem(anthropic.JoinText(blocks))
	default:
		return fmt.Errorf("unknown role %q", m.Role)
	}
	return nil
}

// --- OpenAI chat messages (also SWE-agent history entries), decoded by
// wire/openai (DecodeChatIn) ---

// openAIContent converts content in the OpenAI shapes (a string, null, or
// an array of parts) for chat messages and Codex rollouts alike: the wire
// format's own conversion, openai.Content.
func openAIContent(raw json.RawMessage) ([]history.Block, error) { return openai.Content(raw) }

// openAIAppend converts one chat message; nothing changes on error.
func openAIAppend(b *builder, raw json.RawMessage) error {
	m, err := chat.DecodeChatIn(raw)
	if err != nil {
		return err
	}
	content, err := openAIContent(m.Content)
	if err != nil {
		return err
	}
	switch m.Role {
	case "system", "developer":
		var texts []string
		for _, blk := range content {
			if blk.Type == history.BlockText {
				texts = append(texts, blk.Text)
			}
		}
		b.addSystem(strings.Join(texts, "\n\n"))
	case "user":
		b.user(content, zeroTime)
	case "assistant":
		// An import keeps the arguments' value (a string that is JSON
		// text becomes that value; one that is not, a JSON string), where
		// the proxy's ParseChat keeps their bytes to send them back. An
		// import leaves reasoning_content out, as it always has: without a
		// signature it would become text (docs/decisions.md, "Imported
		// thinking without a signature becomes text").
		for _, c := range m.ToolCalls {
			in := rawjson.Value(c.Function.Arguments)
			if s, ok := c.ArgumentsText(); ok && len(c.Function.Arguments) > 0 {
				in = rawjson.Arguments(s)
			}
			content = append(content, history.Block{Type: history.BlockToolCall, ID: c.ID, Name: c.Function.Name, Input: in})
		}
		b.assistant(history.Message{Content: content, Model: m.Model})
	case "tool":
		ids := m.ToolCallIDs
		if m.ToolCallID != "" {
			ids = append([]string{m.ToolCallID}, ids...)
		}
		if len(ids) == 0 {
			return errors.New("tool message without tool_call_id")
		}
		for _, id := range ids {
			b.tool(id, m.Name, content, false, zeroTime)
		}
	default:
		return fmt.Errorf("unsupported role %q", m.Role)
	}
	return nil
}

// detectChatArray tells an OpenAI chat array from an Anthropic one by the
// fields and block types only one of them uses; with neither (plain
// user/assistant text) the two are the same and Anthropic is reported.
func detectChatArray(arr []byte) string {
	var msgs []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  json.RawMessage `json:"tool_calls"`
		ToolCallID json.RawMessage `json:"tool_call_id"`
	}
	if json.Unmarshal(arr, &msgs) != nil {
		return FormatAnthropicMessages
	}
	for _, m := range msgs {
		switch m.Role {
		case "tool", "function", "developer":
			return FormatOpenAIChat
		}
		if m.ToolCalls != nil || m.ToolCallID != nil {
			return FormatOpenAIChat
		}
		var parts []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &parts) != nil {
			continue
		}
		for _, p := range parts {
			switch {
			case anthropic.OwnBlockType(p.Type):
				return FormatAnthropicMessages
			case chat.OwnPartType(p.Type):
				return FormatOpenAIChat
			}
		}
	}
	return FormatAnthropicMessages
}

// --- SWE-agent trajectories ---

func importSWEAgent(data []byte, opts Options) (*Transcript, error) {
	arr, base, _, err := messagesArray(data, "history")
	if err != nil {
		return nil, err
	}
	elems, err := decodeArray(arr, base)
	if err != nil {
		return nil, err
	}
	b := newBuilder(FormatSWEAgent)
	for _, e := range elems {
		if err := openAIAppend(b, e.raw); err != nil {
			if err := badElement(b.t, opts, "history entry", e, err); err != nil {
				return nil, err
			}
		}
	}
	return b.t, nil
}
