// Package chat is the one home of the Chat Completions wire format (POST
// /v1/chat/completions, also spoken by vLLM, llama.cpp, Ollama and
// OpenRouter): its messages converted to the canonical model
// (docs/design.md §2) and back, its request, its answers whole and
// streamed, its usage chunk, and its wire.Dialect (Dialect).
package chat
