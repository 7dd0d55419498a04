package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/ctxd/ctxd/internal/rawjson"
)

// ErrBadRequest marks a body ctxd cannot read as a request of its API;
// the error names the field.
var ErrBadRequest = errors.New("bad request body")

func badField(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadRequest, field, fmt.Sprintf(format, args...))
}

// Request is a request body as the client sent it, read in one pass
// (Scan): the members ctxd reads, and the byte range of the conversation
// ("messages", or the Responses API's "input") so the outgoing body can
// replace that value and keep every other byte.
type Request struct {
	// Prefix counts the leading items of the fixed prefix
	// (Dialect.IsPrefix), kept verbatim ahead of the assembled
	// conversation.
	Prefix int
	// OpenAI: prompt_cache_key (a session identity), previous_response_id
	// and a conversation (server-side state: not managed), stream_options.
	PromptCacheKey     string
	PreviousResponseID string
	Conversation       bool
	StreamOptions      json.RawMessage
	// MsgStart and MsgEnd bound the conversation's value in the body;
	// Messages are its raw elements.
	MsgStart, MsgEnd int
	Messages         []json.RawMessage
	// Blocks is the sum of rawjson.Blocks over Messages, counted as the
	// conversation is split: what proxy.limits.content_blocks bounds.
	Blocks     uint64
	Model      string
	Stream     bool
	System     json.RawMessage
	Tools      json.RawMessage
	ToolChoice json.RawMessage
	Metadata   json.RawMessage
	Thinking   json.RawMessage
}

// ServerState names the member by which the request continues a
// conversation the provider keeps — "previous_response_id", else
// "conversation" — and "" when it continues none: ctxd cannot see such
// state, so it cannot manage the request.
func (r *Request) ServerState() string {
	switch {
	case r.PreviousResponseID != "":
		return "previous_response_id"
	case r.Conversation:
		return "conversation"
	}
	return ""
}

// PrefixHash is the fast hash (FastSeed) of what the engine is given as
// the system prompt: the system or instructions bytes and the prefix
// items, each after a zero byte. Compared in memory only, as the message
// hashes are (Digests): a ~24 KB system prompt is not put through SHA-256
// at every request.
func (r *Request) PrefixHash() uint64 {
	h := xxh3.NewSeed(FastSeed)
	_, _ = h.Write(r.System)
	for _, raw := range r.Messages[:r.Prefix] {
		_, _ = h.Write([]byte{0})
		_, _ = h.Write(raw)
	}
	return h.Sum64()
}

// ToolsHash is the fast hash (FastSeed) of the request's tools bytes.
func (r *Request) ToolsHash() uint64 { return xxh3.HashSeed(r.Tools, FastSeed) }

// Scan reads body, a request of the dialect d: a JSON object with the
// dialect's conversation array. It scans the top level by hand, in one
// pass without decoding what it does not need: the conversation is split
// into its raw elements (each decoded later only when it is new), and only
// the small members ctxd reads are decoded. A body whose syntax it cannot
// follow is refused; one that is valid to the scanner but not JSON goes
// upstream and is the provider's to refuse. Errors wrap ErrBadRequest and
// name the field.
func Scan(body []byte, d Dialect) (*Request, error) {
	r := &Request{MsgStart: -1}
	items := d.ItemsKey()
	responses := d.Name() == "responses"
	i := rawjson.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, badField("body", "not a JSON object")
	}
	i = rawjson.SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return nil, badField(items, "missing")
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return nil, badField("body", "expected a key at byte %d", i)
		}
		kEnd := rawjson.StringEnd(body, i)
		key := string(body[i+1 : kEnd-1])
		if strings.IndexByte(key, '\\') >= 0 {
			if err := json.Unmarshal(body[i:kEnd], &key); err != nil {
				return nil, badField("body", "key at byte %d: %v", i, err)
			}
		}
		i = rawjson.SkipSpace(body, kEnd)
		if i >= len(body) || body[i] != ':' {
			return nil, badField(key, "expected ':' at byte %d", i)
		}
		vStart := rawjson.SkipSpace(body, i+1)
		var (
			vEnd   int
			elems  []json.RawMessage
			blocks uint64
			err    error
		)
		if key == items {
			// Split as it is scanned: one pass over the ~1 MB, not two.
			if r.MsgStart >= 0 {
				return nil, badField(items, "given twice")
			}
			if vStart < len(body) && body[vStart] == '"' {
				vEnd = rawjson.ValueEnd(body, vStart) // a Responses string input
			} else if elems, vEnd, blocks, err = rawjson.ScanArrayBlocks(body, vStart); err != nil {
				return nil, badField(items, "%v", err)
			}
		} else {
			vEnd = rawjson.ValueEnd(body, vStart)
		}
		if vEnd <= vStart || vEnd > len(body) {
			return nil, badField(key, "no value")
		}
		raw := body[vStart:vEnd]
		switch key {
		case items:
			r.MsgStart, r.MsgEnd = vStart, vEnd
			if responses && raw[0] == '"' {
				// A string input is one user message (the Responses
				// API's own reading), kept as the client's bytes.
				r.Messages = []json.RawMessage{stringInput(raw)}
				r.Blocks = 1
				break
			}
			if raw[0] != '[' {
				_, err = rawjson.SplitArray(raw) // "not an array"
				break
			}
			r.Messages, r.Blocks = elems, blocks
		case "instructions":
			if responses {
				r.System = raw
			}
		case "prompt_cache_key":
			err = json.Unmarshal(raw, &r.PromptCacheKey)
		case "previous_response_id":
			err = json.Unmarshal(raw, &r.PreviousResponseID)
		case "conversation":
			// A conversation the provider keeps (an id, or an object
			// naming it): server-side state, like previous_response_id.
			if responses && string(raw) != "null" {
				r.Conversation = true
			}
		case "stream_options":
			r.StreamOptions = raw
		case "model":
			err = json.Unmarshal(raw, &r.Model)
		case "stream":
			err = json.Unmarshal(raw, &r.Stream)
		case "system":
			r.System = raw
		case "tools":
			r.Tools = raw
		case "tool_choice":
			r.ToolChoice = raw
		case "metadata":
			r.Metadata = raw
		case "thinking":
			r.Thinking = raw
		}
		if err != nil {
			return nil, badField(key, "%v", err)
		}
		i = rawjson.SkipSpace(body, vEnd)
		if i < len(body) && body[i] == ',' {
			i = rawjson.SkipSpace(body, i+1)
			continue
		}
		if i < len(body) && body[i] == '}' {
			if rest := rawjson.SkipSpace(body, i+1); rest != len(body) {
				return nil, badField("body", "data after the object at byte %d", rest)
			}
			break
		}
		return nil, badField("body", "expected ',' or '}' at byte %d", i)
	}
	if r.MsgStart < 0 {
		return nil, badField(items, "missing")
	}
	for r.Prefix < len(r.Messages) && d.IsPrefix(r.Messages[r.Prefix]) {
		r.Prefix++
	}
	if len(r.Messages) == r.Prefix {
		return nil, badField(items, "no conversation (empty, or only system and developer items)")
	}
	return r, nil
}

// stringInput is the item a Responses "input" given as a string stands
// for: a user message whose content is that string, its bytes as sent.
func stringInput(raw []byte) json.RawMessage {
	m := make([]byte, 0, len(raw)+len(`{"role":"user","content":}`))
	m = append(m, `{"role":"user","content":`...)
	m = append(m, raw...)
	return append(m, '}')
}
