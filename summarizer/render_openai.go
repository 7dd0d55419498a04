package summarizer

import (
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/openai/chat"
)

// The Chat Completions format lives in package wire/openai (one home for
// the OpenAI wire formats, shared with the proxy); these names keep the
// summarizer's API.

// OpenAIRequest is a Chat Completions request body (chat.ChatRequest).
type OpenAIRequest = chat.ChatRequest

// OpenAIMessage is one chat message (chat.ChatMessage).
type OpenAIMessage = chat.ChatMessage

// OpenAIToolCall is one function call of an assistant message
// (chat.ToolCall).
type OpenAIToolCall = chat.ToolCall

// OpenAIFunctionCall is the function of a tool call (chat.FunctionCall).
type OpenAIFunctionCall = chat.FunctionCall

// OpenAITool is one function tool definition (chat.Tool).
type OpenAITool = chat.Tool

// OpenAIFunction is the function of a tool definition (chat.Function).
type OpenAIFunction = chat.Function

// RenderOpenAI renders a system prompt, tool definitions and canonical
// messages as a Chat Completions request; see chat.RenderChat.
func RenderOpenAI(system string, tools []history.ToolDef, msgs []history.Message) OpenAIRequest {
	return chat.RenderChat(system, tools, msgs)
}
