package engine

import "context"

// ProxyAPI returns the wire API through which the provider proxy owns
// session id — the LabelProxy label the proxy sets when it creates the
// session: "anthropic", "responses" or "chat" — or "" for a session of
// the daemon API (docs/design.md §10). Labels are fixed at creation, so the
// answer holds for the session's life; it is read from the loaded session
// without the catch-up on the shared log that a write takes (docs/design.md §9),
// so it costs no storage round trip for a session in memory.
// Errors: ErrInvalid (a bad id), ErrNotFound.
func (e *Engine) ProxyAPI(ctx context.Context, id string) (string, error) {
	s, err := e.session(ctx, id)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meta.Labels[LabelProxy], nil
}
