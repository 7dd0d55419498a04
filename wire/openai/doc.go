// Package openai is the one home of the OpenAI wire formats: Chat
// Completions (POST /v1/chat/completions, also spoken by vLLM, llama.cpp,
// Ollama and OpenRouter) and Responses (POST /v1/responses, Codex CLI's only
// API). It converts their conversation items to the canonical model
// (docs/design.md §2) and back, reads their server-sent event streams and their
// error bodies. It holds no policy: the summarizer and the proxy
// (docs/design.md §10) decide what to send.
package openai
