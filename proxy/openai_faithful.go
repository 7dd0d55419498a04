package proxy

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/zeebo/xxh3"
)

// withClientItems replaces, in out (the outgoing Responses items or Chat
// messages after the prefix, as ctxd rendered them), each item that is
// ctxd's rendering of one of the client's items unchanged by that item as
// the client sent it (docs/proxy.md, "The OpenAI APIs", client bytes): a message
// ctxd has not rewritten — not a summary, an offloaded result's stub, an
// elided or context-edited message — goes out as the client's own bytes,
// with the fields the canonical form does not keep (a Chat message's
// name, a part's cache_control, an image's detail, an assistant item's
// id, status and annotations, unknown fields), key order and spacing. The
// items are aligned from the end like encode's: each outgoing item takes
// the latest client item, before the one the next took, with the same
// rendering. custom names the request's free-form tools
// (openai.CustomToolNames). out is changed in place and returned.
func (p *Proxy) withClientItems(b *branch, req *request, out []json.RawMessage, custom map[string]bool) []json.RawMessage {
	idx := p.indexClientItems(b, req, custom)
	lastK := len(req.messages)
	for i := len(out) - 1; i >= 0; i-- {
		ks := idx.keys[itemKey(out[i])]
		j, _ := slices.BinarySearch(ks, lastK)
		if j == 0 {
			continue
		}
		k := ks[j-1]
		lastK = k
		out[i] = req.messages[k]
	}
	return out
}

// indexClientItems records, for the client's items of req not yet indexed
// on b, the digest of ctxd's rendering of each alone (one item rendering
// to one item) → its indexes, in order: the OpenAI counterpart of
// indexClient, kept on the branch the same way (itemIdx, itemN; dropped
// with the branch's encoding cache, keepEncoding), so a request indexes
// only its new items; after a restart or on a new branch the whole list
// is indexed once. Called under the lane's lock.
func (p *Proxy) indexClientItems(b *branch, req *request, custom map[string]bool) *clientIndex {
	p.mu.Lock()
	idx, n := b.itemIdx, b.itemN
	p.mu.Unlock()
	if idx == nil || n > len(req.messages) || (req.changedAt >= 0 && req.changedAt < n) {
		idx, n = &clientIndex{keys: map[digest][]int{}}, 0
	}
	for k := max(n, req.prefix); k < len(req.messages); k++ {
		r := renderAlone(req.d, req.messages[:k+1], k, custom)
		if r == nil {
			continue
		}
		key := itemKey(r)
		idx.keys[key] = append(idx.keys[key], k)
	}
	p.mu.Lock()
	b.itemIdx, b.itemN = idx, len(req.messages)
	p.mu.Unlock()
	p.keepEncoding(b, nil)
	return idx
}

// renderAlone is ctxd's rendering of the client's item items[k] read on
// its own (tool names from the items before it): nil unless it renders to
// exactly one item. The output of a free-form tool's call renders as a
// custom_tool_call_output only after its call; one is rendered after a
// call of a free-form tool so that it has the rendering it has in the
// conversation.
func renderAlone(d dialect, items []json.RawMessage, k int, custom map[string]bool) json.RawMessage {
	ms, err := d.Parse(items, k)
	if err != nil || len(ms) != 1 {
		return nil
	}
	if d != dialectResponses {
		r := openai.RenderChatMessages(ms)
		if len(r) != 1 {
			return nil
		}
		return r[0]
	}
	var it struct {
		Type string `json:"type"`
	}
	if ms[0].Role == history.RoleTool && json.Unmarshal(items[k], &it) == nil && it.Type == "custom_tool_call_output" {
		const name = "\x00ctxd-custom"
		call := history.Message{Role: history.RoleAssistant, Content: []history.Block{{
			Type: history.BlockToolCall, ID: ms[0].ToolCallID, Name: name, Input: json.RawMessage(`{"input":""}`)}}}
		r := openai.RenderItems([]history.Message{call, ms[0]}, map[string]bool{name: true})
		if len(r) != 2 {
			return nil
		}
		return r[1]
	}
	r := openai.RenderItems(ms, custom)
	if len(r) != 1 {
		return nil
	}
	return r[0]
}

// itemKey is the key by which an outgoing item is matched to a client
// item: a fast keyed hash of its bytes (xxh3, 128 bits, with body.go's
// per-process seed; every outgoing item is hashed on every request, and
// SHA-256 of a 1 MB conversation costs a millisecond here). A reasoning or
// compaction item, which ctxd sends back as recorded from the answer's
// stream while the client resends its own encoding of it (Codex adds
// "content":null), is hashed as its members without the null ones, in key
// order, compact: the client's re-encoding of the item ctxd recorded is
// matched, and goes upstream as the client's bytes.
func itemKey(raw json.RawMessage) digest {
	var d digest
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
	h := xxh3.Hash128Seed(raw, fastSeed).Bytes()
	copy(d[:16], h[:])
	return d
}
