package responses

import (
	"encoding/json"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
)

// ResponsesRequest is a Responses API request body that ctxd itself sends
// (the summarizer's openai-responses provider): instructions, the
// conversation as input items, function tools, no stored state.
type ResponsesRequest struct {
	Model string `json:"model"`
	// Instructions is a JSON string (the client's own bytes when known).
	Instructions json.RawMessage   `json:"instructions,omitempty"`
	Input        []json.RawMessage `json:"input"`
	// Tools is a JSON array of tool definitions (the client's own bytes
	// when known).
	Tools json.RawMessage `json:"tools,omitempty"`
	// ToolChoice "none" when tools are sent: the answer is text.
	ToolChoice      string `json:"tool_choice,omitempty"`
	MaxOutputTokens uint64 `json:"max_output_tokens,omitempty"`
	// Store is false: nothing is kept on the provider's side.
	Store bool `json:"store"`
}

// RenderResponses renders a system prompt, tool definitions and canonical
// messages as a Responses request (the inverse of ParseItems for the
// messages, RenderItems; function tools {"type":"function","name",
// "description","parameters"}).
func RenderResponses(system string, tools []history.ToolDef, msgs []history.Message) ResponsesRequest {
	r := ResponsesRequest{Input: RenderItems(msgs, nil)}
	if system != "" {
		r.Instructions, _ = openai.Marshal(system)
	}
	if len(tools) > 0 {
		defs := make([]map[string]any, 0, len(tools))
		for _, t := range tools {
			params := t.InputSchema
			if len(params) == 0 {
				params = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			defs = append(defs, map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": params})
		}
		r.Tools, _ = openai.Marshal(defs)
		r.ToolChoice = "none"
	}
	return r
}

// ResponsesOutcome is what a non-streamed Responses answer says to a
// caller that wants its text: the output_text of its messages joined, and
// whether it called a tool, refused, or stopped short (status
// "incomplete", with its reason), with the usage.
type ResponsesOutcome struct {
	Text             string
	ToolCall         bool
	Refused          bool
	Incomplete       bool
	IncompleteReason string
	Usage            *history.Usage
	// Error is an error object the body carried (nil when none).
	Error *openai.APIError
}

// DecodeResponsesOutcome reads a non-streamed Responses answer. Errors:
// the body is not JSON.
func DecodeResponsesOutcome(body []byte) (ResponsesOutcome, error) {
	var r struct {
		Status            string            `json:"status"`
		Output            []json.RawMessage `json:"output"`
		Usage             json.RawMessage   `json:"usage"`
		Error             *openai.APIError  `json:"error"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return ResponsesOutcome{}, err
	}
	o := ResponsesOutcome{Usage: openai.Usage(r.Usage), Error: r.Error, Incomplete: r.Status == "incomplete"}
	if r.IncompleteDetails != nil {
		o.IncompleteReason = r.IncompleteDetails.Reason
	}
	var text strings.Builder
	for _, raw := range r.Output {
		var it struct {
			Type    string `json:"type"`
			Content []struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				Refusal string `json:"refusal"`
			} `json:"content"`
		}
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				switch c.Type {
				case "output_text":
					text.WriteString(c.Text)
				case "refusal":
					o.Refused = true
				}
			}
		case "function_call", "custom_tool_call", "web_search_call", "file_search_call", "computer_call", "mcp_call", "local_shell_call":
			o.ToolCall = true
		}
	}
	o.Text = text.String()
	return o, nil
}
