package summarizer

import (
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai"
)

// The Chat Completions format lives in package wire/openai (one home for
// the OpenAI wire formats, shared with the proxy); these names keep the
// summarizer's API.

// OpenAIRequest is a Chat Completions request body (openai.ChatRequest).
type OpenAIRequest = openai.ChatRequest

// OpenAIMessage is one chat message (openai.ChatMessage).
type OpenAIMessage = openai.ChatMessage

// OpenAIToolCall is one function call of an assistant message
// (openai.ToolCall).
type OpenAIToolCall = openai.ToolCall

// OpenAIFunctionCall is the function of a tool call (openai.FunctionCall).
type OpenAIFunctionCall = openai.FunctionCall

// OpenAITool is one function tool definition (openai.Tool).
type OpenAITool = openai.Tool

// OpenAIFunction is the function of a tool definition (openai.Function).
type OpenAIFunction = openai.Function

// RenderOpenAI renders a system prompt, tool definitions and canonical
// messages as a Chat Completions request; see openai.RenderChat.
func RenderOpenAI(system string, tools []history.ToolDef, msgs []history.Message) OpenAIRequest {
	return openai.RenderChat(system, tools, msgs)
}
