package chat

import (
	"encoding/json"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/bodybuf"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai"
)

// NewRenderer is a branch's empty wire.Renderer for Chat Completions.
func (Dialect) NewRenderer() wire.Renderer { return &renderer{} }

// renderer is Chat Completions' wire.Renderer: its only cache is the
// index of the client's messages (wire.ClientItems).
type renderer struct{ wire.ClientItems }

// Render is the client's prefix messages as it sent them, then msgs
// rendered (RenderChatMessages), each message ctxd has not rewritten as
// the client's own bytes; a stream whose usage the client did not ask for
// asks for it (HidesUsage, WithIncludeUsage). It never fails; req.Tail is
// not sent.
func (r *renderer) Render(msgs []history.Message, req *wire.RenderRequest) (*bodybuf.Body, error) {
	out := r.With(req, RenderChatMessages(msgs), RenderChatAlone, itemKey)
	body := req.ItemsBody(out, nil)
	if (Dialect{}).HidesUsage(req.Stream, req.StreamOptions) {
		body = bodybuf.Of(WithIncludeUsage(body.Bytes()))
	}
	return body, nil
}

// itemKey is openai.ItemKey with the process's seed.
func itemKey(raw json.RawMessage) wire.Digest { return openai.ItemKey(raw, wire.FastSeed) }
