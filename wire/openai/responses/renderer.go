package responses

import (
	"encoding/json"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai"
)

// NewRenderer is a branch's empty wire.Renderer for the Responses API.
func (Dialect) NewRenderer() wire.Renderer { return &renderer{} }

// renderer is the Responses API's wire.Renderer: its only cache is the
// index of the client's items (wire.ClientItems).
type renderer struct{ wire.ClientItems }

// Render is the client's prefix items as it sent them, then msgs rendered
// (RenderItems, with the request's free-form tools: CustomToolNames), each
// item ctxd has not rewritten as the client's own bytes; a final
// compaction_trigger, which is never stored, goes last as the client sent
// it (TrailingTrigger). It never fails; req.Tail is not sent.
func (r *renderer) Render(msgs []history.Message, req *wire.RenderRequest) (*bodybuf.Body, error) {
	tools := append([]json.RawMessage{req.Tools}, req.Items[:req.Prefix]...)
	custom := CustomToolNames(tools...)
	out := r.With(req, RenderItems(msgs, custom), func(items []json.RawMessage, k int) json.RawMessage {
		return RenderItemAlone(items, k, custom)
	}, itemKey)
	return req.ItemsBody(out, TrailingTrigger(req.Items)), nil
}

// itemKey is openai.ItemKey with the process's seed.
func itemKey(raw json.RawMessage) wire.Digest { return openai.ItemKey(raw, wire.FastSeed) }
