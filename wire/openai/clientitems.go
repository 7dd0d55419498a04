package openai

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"

	"github.com/ctxd/ctxd/history"
	"github.com/zeebo/xxh3"
)

// Client-bytes reuse (docs/proxy.md, "The OpenAI APIs", client bytes): an
// item ctxd has not rewritten goes upstream as the client's own bytes. The
// proxy indexes the client's items by ItemKey of their rendering alone and
// looks its outgoing items up by the same key.

// RenderChatAlone is ctxd's rendering of the client's Chat message
// items[k] read on its own (tool names from the items before it): nil
// unless it renders to exactly one message.
func RenderChatAlone(items []json.RawMessage, k int) json.RawMessage {
	ms, err := ParseChat(items, k)
	if err != nil || len(ms) != 1 {
		return nil
	}
	r := RenderChatMessages(ms)
	if len(r) != 1 {
		return nil
	}
	return r[0]
}

// RenderItemAlone is ctxd's rendering of the client's Responses item
// items[k] read on its own: nil unless it renders to exactly one item.
// The output of a free-form tool's call renders as a
// custom_tool_call_output only after its call; one is rendered after a
// call of a free-form tool so that it has the rendering it has in the
// conversation. custom names the request's free-form tools
// (CustomToolNames).
func RenderItemAlone(items []json.RawMessage, k int, custom map[string]bool) json.RawMessage {
	ms, err := ParseItems(items, k)
	if err != nil || len(ms) != 1 {
		return nil
	}
	var it struct {
		Type string `json:"type"`
	}
	if ms[0].Role == history.RoleTool && json.Unmarshal(items[k], &it) == nil && it.Type == "custom_tool_call_output" {
		const name = "\x00ctxd-custom"
		call := history.Message{Role: history.RoleAssistant, Content: []history.Block{{
			Type: history.BlockToolCall, ID: ms[0].ToolCallID, Name: name, Input: json.RawMessage(`{"input":""}`)}}}
		r := RenderItems([]history.Message{call, ms[0]}, map[string]bool{name: true})
		if len(r) != 2 {
			return nil
		}
		return r[1]
	}
	r := RenderItems(ms, custom)
	if len(r) != 1 {
		return nil
	}
	return r[0]
}

// ItemKey is the key by which an outgoing item is matched to a client
// item: a fast keyed hash of its bytes (xxh3, 128 bits, with the caller's
// per-process seed; every outgoing item is hashed on every request, and
// SHA-256 of a 1 MB conversation costs a millisecond). A reasoning or
// compaction item, which ctxd sends back as recorded from the answer's
// stream while the client resends its own encoding of it (Codex adds
// "content":null), is hashed as its members without the null ones, in key
// order, compact: the client's re-encoding of the item ctxd recorded is
// matched, and goes upstream as the client's bytes.
func ItemKey(raw json.RawMessage, seed uint64) [sha256.Size]byte {
	var d [sha256.Size]byte
	if bytes.Contains(raw, []byte(`"reasoning"`)) || bytes.Contains(raw, []byte(`"compaction"`)) {
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil && (m["type"] == "reasoning" || m["type"] == "compaction") {
			for k, v := range m {
				if v == nil {
					delete(m, k)
				}
			}
			if b, err := json.Marshal(m); err == nil {
				raw, d[16] = b, 1
			}
		}
	}
	h := xxh3.Hash128Seed(raw, seed).Bytes()
	copy(d[:16], h[:])
	return d
}
