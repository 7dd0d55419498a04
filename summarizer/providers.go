package summarizer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire/anthropic"
	"github.com/ctxd/ctxd/wire/openai"
	"github.com/ctxd/ctxd/wire/openai/chat"
)

// The providers a binding may name (docs/design.md §3).
const (
	ProviderAnthropic  = "anthropic"
	ProviderOpenAI     = "openai"
	ProviderExtractive = "extractive"
)

// Default base URLs of the network providers, used when a binding leaves
// base_url empty.
const (
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	DefaultOpenAIBaseURL    = "https://api.openai.com"
)

// AnthropicVersion is the anthropic-version header sent with every
// Anthropic request.
const AnthropicVersion = "2023-06-01"

// DefaultAnthropicMaxTokens is max_tokens of an Anthropic call when the
// binding leaves max_output_tokens 0 (Anthropic requires the field), in
// tokens.
const DefaultAnthropicMaxTokens uint64 = 16384

// answer is what a provider answered, before the answer checks.
type answer struct {
	text      string
	toolCall  bool // a tool call block, or a tool-call stop reason
	truncated bool // cut at the output cap
	refused   bool // refusal or content filter
	usage     *history.Usage
}

// callOutcome is one binding call's answer or failure, with what the
// attempt record needs.
type callOutcome struct {
	ans    answer
	status int
	tries  int
	err    *ProviderError
}

// apiKey reads the binding's key from its environment variable, at call
// time only; it is never logged or stored. An unset api_key_env sends no
// key (local servers need none).
func apiKey(b config.Binding) (string, *ProviderError) {
	if b.APIKeyEnv == "" {
		return "", nil
	}
	key := os.Getenv(b.APIKeyEnv)
	if key == "" {
		return "", &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent,
			Message: fmt.Sprintf("environment variable %s (api_key_env) is unset or empty", b.APIKeyEnv),
			Err:     ErrMissingAPIKey}
	}
	return key, nil
}

// endpoint joins a base URL (default def) and a path; a base URL already
// ending in /v1 is not given a second one.
func endpoint(base, def, path string) string {
	if base == "" {
		base = def
	}
	base = strings.TrimRight(base, "/")
	if strings.HasSuffix(base, "/v1") {
		path = strings.TrimPrefix(path, "/v1")
	}
	return base + path
}

// send posts body and turns what came back into a callOutcome: the 2xx
// body for decode, or a classified *ProviderError.
func (s *Summarizer) send(ctx context.Context, b config.Binding, url string, h http.Header, body []byte, decode func([]byte) (answer, error)) callOutcome {
	res, err := s.post(ctx, url, h, body)
	out := callOutcome{status: res.status, tries: res.tries}
	if err != nil {
		out.err = &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassTransient,
			Message: "no response: " + err.Error(), Err: err}
		return out
	}
	if res.status < 200 || res.status > 299 {
		// The body is redacted whole before its message is cut to
		// maxMessageBytes: a cut must not leave half a secret behind.
		red := s.redactorFor(b).String(string(res.body))
		out.err = &ProviderError{Binding: b.Name, Provider: b.Provider, Status: res.status,
			Class: Classify(res.status, res.body), Message: errorMessage([]byte(red))}
		if out.err.Class == ClassContextLength {
			out.err.Count, out.err.Limit = contextLengthFigures(b.Provider, res.body)
		}
		return out
	}
	ans, err := decode(res.body)
	if err != nil {
		out.err = &ProviderError{Binding: b.Name, Provider: b.Provider, Status: res.status,
			Class: Classify(res.status, res.body), Message: err.Error()}
		return out
	}
	out.ans = ans
	return out
}

// contextLengthFigures reads a context-length refusal's figures (the
// count of the refused input and the window left for it, in tokens; 0: not
// given) in the wording of the binding's API.
func contextLengthFigures(provider string, body []byte) (count, limit uint64) {
	if provider == ProviderAnthropic {
		return anthropic.ContextLengthFigures(body)
	}
	return openai.ContextLengthFigures(body)
}

// callAnthropic asks an Anthropic Messages endpoint for the summary.
//
// The first call is the cache-friendly extension of the session's own
// request: a proxied session's system, tools and tool_choice as its client
// sent them. toolNone, for the retry of an answer that was a tool call,
// sets tool_choice {"type":"none"}.
func (s *Summarizer) callAnthropic(ctx context.Context, b config.Binding, req *Request, pruned, toolNone bool) callOutcome {
	key, perr := apiKey(b)
	if perr != nil {
		return callOutcome{err: perr}
	}
	msgs, err := req.Assemble()
	if err != nil {
		return callOutcome{err: &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent, Message: err.Error(), Err: err}}
	}
	sys, tools := req.prefix()
	ar := anthropic.Render(sys, tools, msgs)
	ar.Model = b.Model
	ar.MaxTokens = b.MaxOutputTokens
	if ar.MaxTokens == 0 {
		ar.MaxTokens = DefaultAnthropicMaxTokens
	}
	if len(ar.Tools) == 0 && anthropic.HasToolBlocks(&ar) {
		anthropic.FlattenToolBlocks(&ar)
	}
	// The summarizer call does not enable thinking, and then the provider
	// refuses thinking in the final assistant message (docs/design.md §4a).
	anthropic.DropFinalThinking(&ar)
	if !pruned {
		// A breakpoint at the end of the history reads the session's cache
		// and leaves the prompt as the only uncached input.
		anthropic.MarkCacheBreakpoint(&ar, len(ar.Messages)-2)
	}
	var body []byte
	if c := b.Credential; c != nil && !pruned && !req.NoPrefix && (len(c.System) > 0 || len(c.Tools) > 0) {
		// The client's own system and tools, byte for byte: the request
		// then extends the prefix the provider cached for the session.
		cr := clientPrefixRequest{Model: ar.Model, MaxTokens: ar.MaxTokens,
			System: rawOrNil(c.System), Tools: rawOrNil(c.Tools), ToolChoice: rawOrNil(c.ToolChoice), Messages: ar.Messages}
		if toolNone {
			cr.ToolChoice = toolChoiceNone
		}
		body, err = json.Marshal(cr)
	} else if toolNone && len(ar.Tools) > 0 {
		body, err = json.Marshal(struct {
			anthropic.Request
			ToolChoice json.RawMessage `json:"tool_choice"`
		}{ar, toolChoiceNone})
	} else {
		body, err = json.Marshal(ar)
	}
	if err != nil {
		return callOutcome{err: &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent, Message: "encoding request: " + err.Error(), Err: err}}
	}
	h := http.Header{}
	h.Set("anthropic-version", AnthropicVersion)
	if key != "" {
		h.Set("x-api-key", key)
	}
	if c := b.Credential; c != nil {
		if c.APIKey != "" {
			h.Set("x-api-key", c.APIKey)
		}
		if c.Authorization != "" {
			h.Set("Authorization", c.Authorization)
		}
		if c.Beta != "" {
			h.Set("anthropic-beta", c.Beta)
		}
	}
	return s.send(ctx, b, endpoint(b.BaseURL, DefaultAnthropicBaseURL, "/v1/messages"), h, body, decodeAnthropic)
}

// decodeAnthropic reads a Messages API answer (wire/anthropic): its text
// blocks concatenated, whether it calls a tool, whether it was cut
// (Response.Truncated) or refused.
func decodeAnthropic(body []byte) (answer, error) {
	r, err := anthropic.DecodeResponse(body)
	if err != nil {
		return answer{}, err
	}
	if r.Error != nil {
		return answer{}, fmt.Errorf("error body with a success status: %s", errorMessage(body))
	}
	return answer{text: r.Text(), toolCall: r.CallsTool(), truncated: r.Truncated(), refused: r.Refused(), usage: r.Usage.Canonical()}, nil
}

// isOpenAIHost reports whether base is OpenAI's own API (or empty, which
// means it), the one endpoint that wants max_completion_tokens.
func isOpenAIHost(base string) bool {
	if base == "" {
		return true
	}
	u, err := url.Parse(base)
	return err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
}

// callOpenAI asks a Chat Completions endpoint for the summary.
func (s *Summarizer) callOpenAI(ctx context.Context, b config.Binding, req *Request) callOutcome {
	key, perr := apiKey(b)
	if perr != nil {
		return callOutcome{err: perr}
	}
	msgs, err := req.Assemble()
	if err != nil {
		return callOutcome{err: &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent, Message: err.Error(), Err: err}}
	}
	sys, tools := req.prefix()
	var prefix []chat.ChatMessage
	if c := b.Credential; c != nil && !req.NoPrefix && len(c.Prefix) > 0 && json.Unmarshal(c.Prefix, &prefix) == nil {
		// The client's own leading system and developer messages stand
		// for the session's prompt: the request starts as the client's.
		sys = ""
	}
	or := RenderOpenAI(sys, tools, msgs)
	or.Messages = append(prefix, or.Messages...)
	or.Model = b.Model
	// No cap configured: let the server use what the window leaves, rather
	// than ask for more than a small local model's window and be refused.
	if b.MaxOutputTokens > 0 {
		if isOpenAIHost(b.BaseURL) {
			or.MaxCompletionTokens = b.MaxOutputTokens
		} else {
			or.MaxTokens = b.MaxOutputTokens
		}
	}
	body, err := json.Marshal(or)
	if err != nil {
		return callOutcome{err: &ProviderError{Binding: b.Name, Provider: b.Provider, Class: ClassPermanent, Message: "encoding request: " + err.Error(), Err: err}}
	}
	h := openAIHeader(b, key)
	return s.send(ctx, b, endpoint(b.BaseURL, DefaultOpenAIBaseURL, "/v1/chat/completions"), h, body, decodeOpenAI)
}

// decodeOpenAI reads a Chat Completions answer (wire/openai/chat): the
// first choice's text (a string or text parts), whether it calls a tool,
// whether it stopped at the output cap (finish_reason "length") or was
// refused.
func decodeOpenAI(body []byte) (answer, error) {
	r, err := chat.DecodeChat(body)
	if err != nil {
		return answer{}, fmt.Errorf("malformed Chat Completions response: %w", err)
	}
	if !r.HasChoice() {
		if r.Error != nil {
			return answer{}, fmt.Errorf("error body with a success status: %s", errorMessage(body))
		}
		return answer{}, fmt.Errorf("response has no choices")
	}
	return answer{text: r.Text(), toolCall: r.CallsTool(), truncated: r.Truncated(), refused: r.Refused(), usage: r.Usage}, nil
}

// checkAnswer applies the answer checks (docs/design.md §3, §5.3): a tool call,
// an empty answer, a cut answer, a refusal or an answer over maxBytes fails
// the binding. It returns the sentinel of the first failed check, or nil.
func checkAnswer(a answer, maxBytes, minBytes uint64) error {
	switch {
	case a.toolCall:
		return ErrToolCallAnswer
	case a.truncated:
		return ErrAnswerTruncated
	case a.refused:
		return ErrAnswerRefused
	case strings.TrimSpace(a.text) == "":
		return ErrEmptyAnswer
	case uint64(len(a.text)) > maxBytes:
		return fmt.Errorf("%w: %d bytes > %d", ErrAnswerTooLarge, len(a.text), maxBytes)
	case uint64(len(strings.TrimSpace(a.text))) < minBytes:
		return fmt.Errorf("%w: %d bytes, at least %d expected", ErrAnswerTooShort, len(strings.TrimSpace(a.text)), minBytes)
	}
	return nil
}

// MinSummaryBytes is the shortest summary, in bytes, a summarizer's answer
// may be for a long history (at least 100 × MinSummaryBytes of text): a
// shorter one ("I have summarized the conversation.", 36 bytes) is no
// summary of it. A history of MinSummaryHistoryBytes or more needs a
// hundredth of its size, at most MinSummaryBytes; a shorter history has
// no floor (a short summary of a short history is plausible).
const (
	MinSummaryBytes        = 128
	MinSummaryHistoryBytes = 2048
)

// minSummaryBytes is the floor of a summary of msgs, in bytes.
func minSummaryBytes(msgs []history.Message) uint64 {
	var n uint64
	for _, m := range msgs {
		n += textBytes(m.Content)
	}
	if n < MinSummaryHistoryBytes {
		return 0
	}
	return min(MinSummaryBytes, n/100)
}

// textBytes is the size of the text and tool inputs in blocks, in bytes.
func textBytes(blocks []history.Block) uint64 {
	var n uint64
	for _, b := range blocks {
		n += uint64(len(b.Text) + len(b.Input))
	}
	return n
}

// clientPrefixRequest is an Anthropic request whose system and tools are a
// client's own JSON (config.Credential).
type clientPrefixRequest struct {
	Model      string              `json:"model,omitempty"`
	MaxTokens  uint64              `json:"max_tokens,omitempty"`
	System     json.RawMessage     `json:"system,omitempty"`
	Tools      json.RawMessage     `json:"tools,omitempty"`
	ToolChoice json.RawMessage     `json:"tool_choice,omitempty"`
	Messages   []anthropic.Message `json:"messages"`
}

// toolChoiceNone is the Messages API's tool_choice that forbids tool calls.
var toolChoiceNone = json.RawMessage(`{"type":"none"}`)

func rawOrNil(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// openAIHeader is the header of a request to an OpenAI API: the binding's
// key as a bearer token, or a proxied session's own client credential
// when it has one (docs/design.md §10).
func openAIHeader(b config.Binding, key string) http.Header {
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	if c := b.Credential; c != nil && c.Authorization != "" {
		h.Set("Authorization", c.Authorization)
	}
	return h
}
