package anthropic

import "encoding/json"

// EditedRequest is a Messages request with the provider's context editing
// asked for: its context_management parameter (the edits, as
// contextedit.ServerEdit writes them), left out when nil. What the
// daemon's ?format=anthropic serves in context-editing mode "server".
type EditedRequest struct {
	Request
	ContextManagement json.RawMessage `json:"context_management,omitempty"`
}
