package engine

import "context"

// LastSeq returns the seq of session id's newest event (0 when it has
// none) without loading the session: the bound of an event stream's
// ?from and Last-Event-ID (docs/design.md §7). Errors: ErrInvalid, ErrNotFound,
// the log's.
func (e *Engine) LastSeq(ctx context.Context, id string) (uint64, error) {
	if err := validID(id); err != nil {
		return 0, err
	}
	seq, err := e.opts.Log.LastSeq(ctx, id)
	return seq, mapLogErr(id, err)
}

// Shared says other nodes write the engine's log (Options.Shared, the NATS
// backend of docs/design.md §9): a caller keeping its own state derived from a
// session (the proxy's lanes) must check it against the log before use.
func (e *Engine) Shared() bool { return e.opts.Shared }

// SystemPrompt returns session id's system prompt as it stands ("" when it
// has none). Errors: ErrInvalid, ErrNotFound.
func (e *Engine) SystemPrompt(ctx context.Context, id string) (string, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	return s.system, nil
}
