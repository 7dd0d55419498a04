package proxy

import (
	"encoding/json"

	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/openai/chat"
	"github.com/ctxd/ctxd/wire/openai/responses"
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
// (responses.CustomToolNames). out is changed in place and returned.
func (p *Proxy) withClientItems(b *branch, req *request, out []json.RawMessage, custom map[string]bool) []json.RawMessage {
	idx := p.indexClientItems(b, req, custom)
	lastK := len(req.messages)
	for i := len(out) - 1; i >= 0; i-- {
		k, ok := idx.Latest(openai.ItemKey(out[i], wire.FastSeed), lastK)
		if !ok {
			continue
		}
		lastK = k
		out[i] = req.messages[k]
	}
	return out
}

// indexClientItems records, for the client's items of req not yet indexed
// on b, the digest of ctxd's rendering of each alone (one item rendering
// to one item) → its indexes, in order: the OpenAI counterpart of
// the Messages API's renderer's index, kept on the branch (itemIdx; dropped
// with the branch's caches, keepRenderer), so a request indexes
// only its new items; after a restart or on a new branch the whole list
// is indexed once. Called under the lane's lock.
func (p *Proxy) indexClientItems(b *branch, req *request, custom map[string]bool) *wire.ClientIndex {
	p.mu.Lock()
	idx := b.itemIdx
	p.mu.Unlock()
	n := 0
	if idx != nil {
		n = idx.Reuse(req.fast, req.messages)
	} else {
		idx = wire.NewClientIndex()
	}
	for k := n; k < len(req.messages); k++ {
		var r json.RawMessage
		if k >= req.prefix {
			if req.d == dialectResponses {
				r = responses.RenderItemAlone(req.messages[:k+1], k, custom)
			} else {
				r = chat.RenderChatAlone(req.messages[:k+1], k)
			}
		}
		if r == nil {
			idx.Add(k, req.fast, req.messages[k], digest{}, false)
			continue
		}
		idx.Add(k, req.fast, req.messages[k], openai.ItemKey(r, wire.FastSeed), true)
	}
	p.mu.Lock()
	b.itemIdx = idx
	p.mu.Unlock()
	p.keepRenderer(b, nil)
	return idx
}
