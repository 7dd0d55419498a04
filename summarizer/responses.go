package summarizer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/wire/openai/responses"
)

// ProviderOpenAIResponses names the OpenAI Responses API as a binding's
// provider (docs/design.md §3): the API Codex speaks, and the one a proxied
// Responses session is summarized through (§10 "who pays").
const ProviderOpenAIResponses = config.ProviderOpenAIResponses

// callResponses asks a Responses endpoint (POST /v1/responses) for the
// summary: the summarizer request's messages as input items, the session's
// system prompt as instructions and its tools as function tools with
// tool_choice "none", store false. A proxied session's binding carries the
// client's own instructions and prefix items (config.Credential) — Codex's
// additional_tools item declares its code-mode tools, free-form ones
// included, as the API declares them — sent byte for byte ahead of the
// history so the request extends the prefix the provider cached, and its
// custom tools' calls go back as custom_tool_call items. toolNone (the
// retry of an answer that was a tool call) sets tool_choice "none" even
// with no function tools.
func (s *Summarizer) callResponses(ctx context.Context, b config.Binding, req *Request, toolNone bool) callOutcome {
	key, perr := apiKey(b)
	if perr != nil {
		return callOutcome{err: perr}
	}
	msgs, err := req.Assemble()
	if err != nil {
		return callOutcome{err: &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent, Message: err.Error(), Err: err}}
	}
	sys, tools := req.prefix()
	rr := responses.RenderResponses(sys, tools, msgs)
	rr.Model = b.Model
	rr.MaxOutputTokens = b.MaxOutputTokens
	if c := b.Credential; c != nil && !req.NoPrefix {
		if len(c.System) > 0 || len(c.Prefix) > 0 {
			rr.Instructions = rawOrNil(c.System)
		}
		var prefix []json.RawMessage
		if len(c.Prefix) > 0 {
			_ = json.Unmarshal(c.Prefix, &prefix)
		}
		custom := responses.CustomToolNames(append([]json.RawMessage{json.RawMessage(c.Tools)}, prefix...)...)
		if len(c.Tools) > 0 {
			rr.Tools, rr.ToolChoice = json.RawMessage(c.Tools), "none"
		}
		if len(c.Tools) > 0 || len(prefix) > 0 {
			rr.Input = responses.RenderItems(msgs, custom)
		}
		if len(prefix) > 0 {
			rr.Input = append(prefix, rr.Input...)
		}
	}
	if toolNone {
		rr.ToolChoice = "none"
	}
	body, err := json.Marshal(rr)
	if err != nil {
		return callOutcome{err: &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent, Message: "encoding request: " + err.Error(), Err: err}}
	}
	h := openAIHeader(b, key)
	return s.send(ctx, b, endpoint(b.BaseURL, DefaultOpenAIBaseURL, "/v1/responses"), h, body, decodeResponses)
}

// decodeResponses reads a Responses answer: its output text, whether it
// calls a tool or refused, and whether it stopped at the output cap
// (status "incomplete", reason max_output_tokens) — an incomplete answer
// of any reason is a cut one.
func decodeResponses(body []byte) (answer, error) {
	o, err := responses.DecodeResponsesOutcome(body)
	if err != nil {
		return answer{}, fmt.Errorf("malformed Responses answer: %w", err)
	}
	if o.Error != nil {
		return answer{}, fmt.Errorf("error body with a success status: %s", errorMessage(body))
	}
	reason := o.IncompleteReason
	return answer{text: o.Text, toolCall: o.ToolCall, refused: o.Refused || reason == "content_filter",
		truncated: o.Incomplete && reason != "content_filter", usage: o.Usage}, nil
}
