// Package openai is what the two OpenAI wire formats share — Chat
// Completions (package chat) and Responses (package responses): content
// parts read into canonical blocks, tool-call arguments kept as sent,
// usage, error bodies and the figures of a context-length refusal, the
// prompt cache's elements, the key an item is matched to the client's by,
// and the part of wire.Dialect that is the same for both (Common). It
// holds no policy: the summarizer and the proxy (docs/design.md §10)
// decide what to send.
package openai
