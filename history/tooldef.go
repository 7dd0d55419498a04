package history

import "encoding/json"

// ToolDef is one tool definition a session offers the model, in the
// provider-neutral shape (close to Anthropic's): a name, a description and a
// JSON Schema of the input. Rendered per provider when a context is assembled
// (docs/design.md §4).
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Tool definition overheads, in o200k tokens (before calibration). A
// provider wraps the tool definitions of a request in its own instructions:
// Anthropic documents a tool-use system prompt of 346 tokens for Claude 4.x
// models (tool_choice auto; 313 for any), about 256 o200k tokens at the
// catalog's factor of 1.35, and formats each definition with its own
// framing. A recorded request of two small tools and a 10-word prompt was
// billed 711 input tokens (pydantic-ai's test_anthropic_tool_output
// cassette); counting the definitions' text alone gives about 120.
// Overcounting for providers with less framing errs on the safe side:
// compaction comes earlier, never later.
const (
	// ToolsPreambleTokens is counted once when a request defines any tool.
	ToolsPreambleTokens = 256
	// ToolDefOverheadTokens is counted per tool definition, beside its
	// name, description and schema.
	ToolDefOverheadTokens = 24
)

// Tools returns the estimated tokens of a request's tool definitions
// (o200k, before calibration): ToolsPreambleTokens when there is any, plus
// per definition ToolDefOverheadTokens and the tokens of its name,
// description and input schema JSON. 0 for none.
func (e Estimator) Tools(tools []ToolDef) uint64 {
	if len(tools) == 0 {
		return 0
	}
	n := uint64(ToolsPreambleTokens)
	for _, t := range tools {
		n += ToolDefOverheadTokens + e.Text(t.Name) + e.Text(t.Description) + e.Text(string(t.InputSchema))
	}
	return n
}
