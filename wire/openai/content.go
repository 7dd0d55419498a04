package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// part is one content part of a Responses or Chat message.
type part struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"`
}

// Content converts message content in the OpenAI shapes — a string, null,
// or an array of parts — for Chat messages, Responses items and Codex
// rollouts alike: a non-empty string as one text block (none for ""); text
// parts ("text", "input_text", "output_text") as text blocks; images
// ("image_url" or "input_image", whose image_url is {"url": …} or the URL
// itself) as image blocks when they hold a data URL; any other part kept
// whole, byte for byte, as a json block (RenderItems sends it back as it
// came). Errors: content that is neither, a part that is not an object.
func Content(raw json.RawMessage) ([]history.Block, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []history.Block{{Type: history.BlockText, Text: s}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, fmt.Errorf("content is neither a string nor an array of parts: %w", err)
	}
	out := make([]history.Block, 0, len(raws))
	for i, r := range raws {
		var p part
		if err := json.Unmarshal(r, &p); err != nil {
			return nil, fmt.Errorf("content part %d: %w", i, err)
		}
		switch p.Type {
		case "text", "input_text", "output_text":
			out = append(out, history.Block{Type: history.BlockText, Text: p.Text})
		case "image_url", "input_image":
			var url struct {
				URL string `json:"url"`
			}
			if json.Unmarshal(p.ImageURL, &url.URL) != nil {
				_ = json.Unmarshal(p.ImageURL, &url)
			}
			if img, ok := DataURLImage(url.URL); ok {
				out = append(out, img)
				continue
			}
			out = append(out, JSONBlock(r))
		default:
			out = append(out, JSONBlock(r))
		}
	}
	return out, nil
}

// JSONBlock keeps a value whole (valid JSON, or its bytes as a JSON
// string; empty input becomes {}).
func JSONBlock(raw json.RawMessage) history.Block {
	switch {
	case len(bytes.TrimSpace(raw)) == 0:
		raw = json.RawMessage("{}")
	case json.Valid(raw):
		raw = append(json.RawMessage(nil), raw...)
	default:
		raw, _ = json.Marshal(string(raw))
	}
	return history.Block{Type: history.BlockJSON, JSON: raw}
}

// MessageBlocks is Content.
func MessageBlocks(raw json.RawMessage) ([]history.Block, error) { return Content(raw) }

// OutputBlocks reads a tool output: a string or an array of parts.
func OutputBlocks(raw json.RawMessage) ([]history.Block, error) {
	blocks, err := MessageBlocks(raw)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return []history.Block{{Type: history.BlockText, Text: ""}}, nil
	}
	return blocks, nil
}

// DataURLImage converts a "data:<media type>;base64,<data>" URL to an
// image block; ok is false for any other URL.
func DataURLImage(url string) (history.Block, bool) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return history.Block{}, false
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return history.Block{}, false
	}
	media, ok := strings.CutSuffix(meta, ";base64")
	if !ok {
		return history.Block{}, false
	}
	return history.Block{Type: history.BlockImage, MediaType: media, Data: data}, true
}

// Marshal encodes v without HTML escaping (OpenAI's own encoders do not
// escape <, > and &).
func Marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// ArgumentsInput is a function call's input: the arguments' bytes when
// they are a compact JSON object (kept exactly by the canonical form),
// else {"openai_raw_arguments": "<the arguments>"} (RawArgumentsKey).
func ArgumentsInput(args string) json.RawMessage {
	raw := json.RawMessage(args)
	if history.IsObject(raw) && json.Valid(raw) {
		var c bytes.Buffer
		if json.Compact(&c, raw) == nil && bytes.Equal(c.Bytes(), raw) {
			return raw
		}
	}
	in, _ := Marshal(map[string]string{RawArgumentsKey: args})
	return in
}

// Arguments is the arguments string of a function call whose canonical
// input is in (argumentsInput's inverse): the string kept under
// RawArgumentsKey when in is that envelope, else in's bytes ("{}" for
// none).
func Arguments(in json.RawMessage) string {
	if len(in) == 0 {
		return "{}"
	}
	if bytes.HasPrefix(in, []byte(`{"`+RawArgumentsKey+`":`)) {
		var m map[string]json.RawMessage
		var s string
		if json.Unmarshal(in, &m) == nil && len(m) == 1 && json.Unmarshal(m[RawArgumentsKey], &s) == nil {
			return s
		}
	}
	return string(in)
}

// PlainText joins the text of blocks with newlines: text as is, json as its
// JSON, images as a line naming them. Thinking blocks are left out.
func PlainText(blocks []history.Block) string {
	var texts []string
	for _, b := range blocks {
		if t := BlockText(b); t != "" {
			texts = append(texts, t)
		}
	}
	return strings.Join(texts, "\n")
}

// BlockText is the text form of one block for text-only destinations.
func BlockText(b history.Block) string {
	switch b.Type {
	case history.BlockText, history.BlockCompaction:
		return b.Text
	case history.BlockJSON:
		return string(b.JSON)
	case history.BlockToolCall:
		return fmt.Sprintf("[tool call %s id=%s input=%s]", b.Name, b.ID, b.Input)
	case history.BlockImage:
		if b.Artifact != "" {
			return fmt.Sprintf("[image %s stored at %s]", b.MediaType, b.Artifact)
		}
		return fmt.Sprintf("[image %s, %d base64 bytes]", b.MediaType, len(b.Data))
	}
	return ""
}

// JSONString encodes s as a JSON string.
func JSONString(s string) json.RawMessage {
	raw, _ := json.Marshal(s) // a string always encodes
	return raw
}

// RawArgumentsKey is the one member of a tool call's canonical input that
// carries a function call's arguments as the client or the model sent
// them, when the canonical model cannot hold them as they are: not a JSON
// object (text that is not JSON, a truncated object, a string or an
// array), or an object whose bytes a stored history would change (the
// canonical form compacts tool call inputs: spacing, docs/design.md §2). The
// renderers send the string back as the arguments, byte for byte, so a
// request that carries such a call is forwarded as sent and the next
// extends it (Arguments).
const RawArgumentsKey = "openai_raw_arguments"
