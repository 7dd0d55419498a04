package history

import "encoding/json"

// ToolDef is one tool definition a session offers the model, in the
// provider-neutral shape (close to Anthropic's): a name, a description and a
// JSON Schema of the input. Rendered per provider when a context is assembled
// (DESIGN.md §4).
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}
