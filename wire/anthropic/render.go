package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// Request is the body of an Anthropic Messages API request
// (POST /v1/messages). Render fills System, Tools and Messages;
// Model and MaxTokens are set by whoever sends it.
type Request struct {
	Model     string    `json:"model,omitempty"`
	MaxTokens uint64    `json:"max_tokens,omitempty"`
	System    string    `json:"system,omitempty"`
	Tools     []Tool    `json:"tools,omitempty"`
	Messages  []Message `json:"messages"`
}

// Tool is one tool definition in Anthropic's shape.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Message is one message of an Anthropic request: role "user" or
// "assistant".
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// Block is one content block of an Anthropic message. Which fields
// are set depends on Type: "text" (Text), "thinking" (Thinking, Signature),
// "redacted_thinking" (Data), "tool_use" (ID, Name, Input), "tool_result"
// (ToolUseID, Content, IsError), "image" (Source).
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   []Block         `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Source    *Source         `json:"source,omitempty"`
	// CacheControl marks a prompt-cache breakpoint: the marker object as
	// the client wrote it ({"type":"ephemeral"}, maybe with a "ttl"), kept
	// whole so a re-placed marker is byte-identical to the client's.
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
	// Compaction is the summary of a "compaction" block (server-side
	// compaction), encoded as its "content" string.
	Compaction string `json:"-"`
	// Raw, when set, is a block carried as the client sent it (Options.Carry):
	// a JSON object with a string "type", without its "cache_control"
	// member. It is written byte for byte, CacheControl appended as its
	// last member; the other fields are unset.
	Raw json.RawMessage `json:"-"`
}

// MarshalJSON encodes b as the API wants it, without HTML escaping: a
// "compaction" block as {"type":"compaction","content":"<summary>"}, any
// other with its fields.
func (b Block) MarshalJSON() ([]byte, error) {
	if len(b.Raw) > 0 {
		if len(b.CacheControl) == 0 {
			return b.Raw, nil
		}
		end := bytes.LastIndexByte(b.Raw, '}')
		out := make([]byte, 0, len(b.Raw)+len(b.CacheControl)+18)
		out = append(out, b.Raw[:end]...)
		out = append(out, `,"cache_control":`...)
		out = append(out, b.CacheControl...)
		return append(out, b.Raw[end:]...), nil
	}
	type plain Block
	var v any = plain(b)
	if b.Type == "compaction" {
		v = struct {
			Type         string          `json:"type"`
			Content      string          `json:"content"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.Compaction, b.CacheControl}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON decodes what MarshalJSON writes: a "compaction" block's
// string content into Compaction.
func (b *Block) UnmarshalJSON(data []byte) error {
	type plain Block
	var probe struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return err
	}
	if probe.Type != "compaction" {
		return json.Unmarshal(data, (*plain)(b))
	}
	*b = Block{Type: probe.Type}
	if len(probe.Content) == 0 {
		return nil
	}
	return json.Unmarshal(probe.Content, &b.Compaction)
}

// Source is the source of an image block: base64 data.
type Source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// Ephemeral is the default prompt-cache breakpoint, {"type":"ephemeral"}.
var Ephemeral = json.RawMessage(`{"type":"ephemeral"}`)

// emptyObject is the input of a call recorded without one, and the schema of
// a tool defined without one: Anthropic requires both to be objects.
var emptyObject = json.RawMessage(`{}`)

// Render renders a system prompt, tool definitions and canonical
// messages (docs/design.md §2) as an Anthropic Messages request:
//
//   - the system prompt is the top-level "system";
//   - tool definitions become Anthropic tool definitions (a missing schema
//     becomes {"type":"object"});
//   - assistant tool_call blocks become tool_use blocks; thinking blocks keep
//     their signature, redacted_thinking its data;
//   - each tool message becomes a tool_result block in a user message, and
//     consecutive tool results are merged into one user message, as the API
//     requires; the result's text and image blocks are kept, json blocks
//     become text holding the JSON;
//   - image blocks with base64 data become image blocks; an image stored as
//     an artifact becomes a text line naming its artifact:// URI;
//   - json blocks outside tool results become text holding the JSON.
//
// The API refuses empty and whitespace-only text blocks and messages without
// content (a model's empty end_turn answer is one): such blocks are dropped,
// and a user or assistant message left with no block is omitted (the API
// joins the turns around it). Nothing else is dropped, and messages are
// rendered in order, so a longer history renders to an extension of a
// shorter one's rendering (docs/design.md §4). The
// caller sets Model and MaxTokens. Render does not validate the
// history; see CheckClosed.
func Render(system string, tools []history.ToolDef, msgs []history.Message) Request {
	return RenderWith(system, tools, msgs, Options{})
}

// Options choose how a rendering treats what the canonical model keeps
// whole.
type Options struct {
	// Carry renders each json block that is an Anthropic content block
	// (a JSON object with a string "type": tool_reference, cache_edits,
	// document, search_result, server-tool results, an image by URL, any
	// future type) as that block, byte for byte, instead of text holding its
	// JSON; its "cache_control" member is left to the marker placement
	// (Block.Raw). A user message marked Joined (ParseMessage), or made
	// only of such blocks, right after tool results joins their message,
	// as the client sent them together; a text or image block that kept
	// the client's bytes (history.Block.Raw) is sent as those bytes while
	// it still holds what they hold.
	// For messages read from the Anthropic wire (ParseMessage): json
	// blocks from other providers must not become Anthropic blocks.
	Carry bool
}

// RenderWith is Render with options.
func RenderWith(system string, tools []history.ToolDef, msgs []history.Message, o Options) Request {
	out := Request{System: system, Messages: []Message{}}
	for _, t := range tools {
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		out.Tools = append(out.Tools, Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	out.Messages = AppendMessagesWith(out.Messages, msgs, o)
	return out
}

// AppendMessages renders msgs after out, a rendering of the messages
// before them (Render's Messages), and returns the extended list: a tool
// result joins the tool results of the last message of out, whose Content
// it then appends to (the caller that keeps out clones that Content
// first). Render(s, t, append(a, b...)).Messages equals
// AppendMessages(Render(s, t, a).Messages, b).
func AppendMessages(out []Message, msgs []history.Message) []Message {
	return AppendMessagesWith(out, msgs, Options{})
}

// AppendMessagesWith is AppendMessages with options;
// RenderWith(s, t, append(a, b...), o).Messages equals
// AppendMessagesWith(RenderWith(s, t, a, o).Messages, b, o).
func AppendMessagesWith(out []Message, msgs []history.Message, o Options) []Message {
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case history.RoleTool:
			res := Block{
				Type:      "tool_result",
				ToolUseID: m.ToolCallID,
				IsError:   m.IsError,
				Content:   renderResultContent(m.Content, o),
			}
			// Consecutive results of one round share one user message.
			if n := len(out); n > 0 && allToolResults(out[n-1]) {
				out[n-1].Content = append(out[n-1].Content, res)
				continue
			}
			out = append(out, Message{Role: "user", Content: []Block{res}})
		default:
			role := "user"
			switch m.Role {
			case history.RoleAssistant:
				role = "assistant"
			case history.RoleSystem:
				role = "system"
			}
			blocks := make([]Block, 0, len(m.Content))
			for _, b := range m.Content {
				if b.Type == history.BlockText && strings.TrimSpace(b.Text) == "" {
					continue // refused by the API, and carries nothing
				}
				blocks = append(blocks, renderBlock(b, o))
			}
			if len(blocks) == 0 {
				continue
			}
			if n := len(out); n > 0 && role == "user" && (m.Joined || allCarried(blocks)) && allToolResults(out[n-1]) {
				out[n-1].Content = append(out[n-1].Content, blocks...)
				continue
			}
			out = append(out, Message{Role: role, Content: blocks})
		}
	}
	return out
}

// allToolResults reports whether m is a user message made only of
// tool_result blocks.
func allToolResults(m Message) bool {
	if m.Role != "user" || len(m.Content) == 0 {
		return false
	}
	for _, b := range m.Content {
		if b.Type != "tool_result" {
			return false
		}
	}
	return true
}

// allCarried reports whether every block of bs is carried (Block.Raw).
func allCarried(bs []Block) bool {
	for _, b := range bs {
		if len(b.Raw) == 0 {
			return false
		}
	}
	return true
}

// Carried is the client's block raw as a carried block (Block.Raw), its
// "cache_control" member cut out; ok is false when raw is not a JSON object
// with a string "type".
func Carried(raw json.RawMessage) (Block, bool) { return carried(raw) }

// carried is the json block raw as a carried block (Block.Raw): a JSON
// object with a string "type", its top-level "cache_control" member cut
// out, the rest byte for byte. ok is false for any other value.
func carried(raw json.RawMessage) (Block, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return Block{}, false
	}
	typ, cut := "", [2]int{-1, -1}
	first := true
	for dec.More() {
		start := int(dec.InputOffset())
		k, err := dec.Token()
		if err != nil {
			return Block{}, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return Block{}, false
		}
		end := int(dec.InputOffset())
		switch k {
		case "type":
			if json.Unmarshal(v, &typ) != nil {
				return Block{}, false
			}
		case "cache_control":
			cut = [2]int{start, end}
			if first {
				// The first member: cut it with the comma after it.
				if i := bytes.IndexByte(raw[end:], ','); i >= 0 {
					cut[1] = end + i + 1
				}
			}
		}
		first = false
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') || typ == "" {
		return Block{}, false
	}
	if cut[0] < 0 {
		return Block{Type: typ, Raw: raw}, true
	}
	out := make(json.RawMessage, 0, len(raw))
	out = append(append(out, raw[:cut[0]]...), raw[cut[1]:]...)
	if !json.Valid(out) {
		return Block{}, false
	}
	return Block{Type: typ, Raw: out}, true
}

// renderBlock renders one block of a user or assistant message.
func renderBlock(b history.Block, o Options) Block {
	if o.Carry && len(b.Raw) > 0 && rawHolds(b) {
		return Block{Type: string(b.Type), Raw: b.Raw}
	}
	if c, ok := carriedSearchResult(b); ok && o.Carry {
		return c
	}
	switch b.Type {
	case history.BlockThinking:
		return Block{Type: "thinking", Thinking: b.Text, Signature: b.Signature}
	case history.BlockRedactedThinking:
		return Block{Type: "redacted_thinking", Data: b.Data}
	case history.BlockCompaction:
		return Block{Type: "compaction", Compaction: b.Text}
	case history.BlockToolCall:
		in := b.Input
		if len(in) == 0 {
			in = emptyObject
		}
		return Block{Type: "tool_use", ID: b.ID, Name: b.Name, Input: in}
	case history.BlockImage:
		return renderImage(b)
	case history.BlockJSON:
		if o.Carry {
			if c, ok := carried(b.JSON); ok {
				return c
			}
		}
		return Block{Type: "text", Text: string(b.JSON)}
	default:
		return Block{Type: "text", Text: b.Text}
	}
}

// rawHolds reports whether the client's bytes of the text or image block
// b (history.Block.Raw) still hold what b holds: its text, or its image
// data and media type. A rewrite that changed the block is rendered from
// its fields.
func rawHolds(b history.Block) bool {
	switch b.Type {
	case history.BlockText:
		var v struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		return json.Unmarshal(b.Raw, &v) == nil && v.Type == "text" && v.Text == b.Text
	case history.BlockImage:
		var v struct {
			Type   string  `json:"type"`
			Source *Source `json:"source"`
		}
		return b.Data != "" && json.Unmarshal(b.Raw, &v) == nil && v.Type == "image" && v.Source != nil &&
			v.Source.Type == "base64" && v.Source.MediaType == b.MediaType && v.Source.Data == b.Data
	}
	return false
}

// anthropicImage renders an image block: inline base64, or a text line when
// the image was moved to the artifact store.
func renderImage(b history.Block) Block {
	if b.Data == "" {
		return Block{Type: "text", Text: fmt.Sprintf("[image %s stored at %s]", b.MediaType, b.Artifact)}
	}
	return Block{Type: "image", Source: &Source{Type: "base64", MediaType: b.MediaType, Data: b.Data}}
}

// anthropicResultContent renders a tool result's blocks as tool_result
// content: text and image blocks; anything else as text.
func renderResultContent(blocks []history.Block, o Options) []Block {
	out := make([]Block, 0, len(blocks))
	for _, b := range blocks {
		switch b.Type {
		case history.BlockImage:
			out = append(out, renderImage(b))
		case history.BlockJSON:
			if o.Carry {
				if c, ok := carried(b.JSON); ok {
					out = append(out, c)
					continue
				}
			}
			out = append(out, Block{Type: "text", Text: string(b.JSON)})
		case history.BlockToolCall:
			out = append(out, Block{Type: "text", Text: string(b.Input)})
		default:
			if strings.TrimSpace(b.Text) == "" {
				continue // the API rejects empty text blocks
			}
			if c, ok := carriedSearchResult(b); ok && o.Carry {
				out = append(out, c)
				continue
			}
			out = append(out, Block{Type: "text", Text: b.Text})
		}
	}
	return out
}

// FlattenToolBlocks rewrites tool_use and tool_result blocks of r as text
// blocks. The pruned retry drops the tool definitions, and Anthropic-format
// endpoints (Bedrock among them) reject tool blocks in a request that
// defines no tools; as text the calls and results keep their meaning.
func FlattenToolBlocks(r *Request) {
	for i := range r.Messages {
		m := &r.Messages[i]
		for j := range m.Content {
			b := &m.Content[j]
			switch b.Type {
			case "tool_use":
				*b = Block{Type: "text", Text: fmt.Sprintf("[tool call %s id=%s input=%s]", b.Name, b.ID, b.Input)}
			case "tool_result":
				var sb strings.Builder
				fmt.Fprintf(&sb, "[tool result id=%s", b.ToolUseID)
				if b.IsError {
					sb.WriteString(" error")
				}
				sb.WriteString("]")
				for _, c := range b.Content {
					sb.WriteString("\n")
					if c.Type == "image" && c.Source != nil {
						fmt.Fprintf(&sb, "[image %s, %d base64 bytes omitted]", c.Source.MediaType, len(c.Source.Data))
						continue
					}
					sb.WriteString(c.Text)
				}
				*b = Block{Type: "text", Text: sb.String()}
			}
		}
	}
}

// HasToolBlocks reports whether r carries a tool_use or tool_result block.
func HasToolBlocks(r *Request) bool {
	for _, m := range r.Messages {
		for _, b := range m.Content {
			if b.Type == "tool_use" || b.Type == "tool_result" {
				return true
			}
		}
	}
	return false
}

// MarkCacheBreakpoint puts a cache_control breakpoint on the last cacheable
// block of message i, so the summarizer call reads the session's cached
// prefix and the prompt after it is the only new input. Thinking blocks
// cannot carry cache_control; an empty text block cannot either.
func MarkCacheBreakpoint(r *Request, i int) {
	if i < 0 || i >= len(r.Messages) {
		return
	}
	c := r.Messages[i].Content
	for j := len(c) - 1; j >= 0; j-- {
		switch c[j].Type {
		case "thinking", "redacted_thinking":
			continue
		case "text":
			if c[j].Text == "" {
				continue
			}
		}
		c[j].CacheControl = Ephemeral
		return
	}
}

// DropFinalThinking removes the thinking and redacted_thinking blocks of
// the last assistant message of r, for a request that does not enable
// thinking: the provider refuses "an `assistant` message in the final
// position" that contains thinking then (docs/design.md §4a). Earlier assistant
// messages keep theirs (the provider ignores them). A message left with no
// block is removed.
func DropFinalThinking(r *Request) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		m := &r.Messages[i]
		if m.Role != "assistant" {
			continue
		}
		kept := m.Content[:0:0]
		for _, b := range m.Content {
			if b.Type != "thinking" && b.Type != "redacted_thinking" {
				kept = append(kept, b)
			}
		}
		if len(kept) == len(m.Content) {
			return
		}
		if len(kept) == 0 {
			r.Messages = append(r.Messages[:i], r.Messages[i+1:]...)
			return
		}
		m.Content = kept
		return
	}
}
