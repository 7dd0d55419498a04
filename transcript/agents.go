package transcript

// Transcripts as more agents write them: mini-swe-agent
// trajectories, OpenAI Responses API request bodies, OpenHands event streams
// (recognised and refused clearly), JSONL lines holding several records, and
// the tool calls a file ends with.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// More formats Import recognises.
const (
	// FormatMiniSWEAgent is a mini-swe-agent trajectory (.traj.json):
	// {"info", "messages": [OpenAI chat messages with an "extra" member],
	// "trajectory_format": "mini-swe-agent-…"}. Usage is read from each
	// assistant message's extra.response.usage; the final role "exit"
	// message (exit status and submission) is not conversation.
	FormatMiniSWEAgent = "mini-swe-agent"
	// FormatOpenAIResponses is an OpenAI Responses API request body:
	// {"instructions"?, "input": a string or an array of items (messages,
	// function_call, function_call_output, reasoning…)}.
	FormatOpenAIResponses = "openai-responses"
)

// ErrUnsupportedFormat: the input is a format Detect recognises but ctxd
// cannot import; the message says what to do instead. errors.Is(err,
// ErrUnknownFormat) holds too, for callers that only know that one.
var ErrUnsupportedFormat = fmt.Errorf("%w: recognised but not supported", ErrUnknownFormat)

// errOpenHands is Detect's answer to an OpenHands event stream.
var errOpenHands = fmt.Errorf("%w: this is an OpenHands event stream (actions and observations, not chat messages); export the conversation as OpenAI chat messages (the LLM completions log holds them) and import that", ErrUnsupportedFormat)

// isOpenHandsEvents reports whether arr is an array of OpenHands events:
// objects with "action" or "observation" beside "source" (or "id" and
// "timestamp"), the shape of its event stream and of the "history" of its
// evaluation output.
func isOpenHandsEvents(arr []byte) bool {
	var evs []map[string]json.RawMessage
	if json.Unmarshal(arr, &evs) != nil || len(evs) == 0 {
		return false
	}
	n := 0
	for _, e := range evs {
		_, act := e["action"]
		_, obs := e["observation"]
		_, src := e["source"]
		_, id := e["id"]
		if (act || obs) && (src || id) {
			n++
		}
	}
	return n > 0 && n*2 >= len(evs)
}

// isMiniSWEAgent recognises a mini-swe-agent trajectory by its
// "trajectory_format" or its info.mini_version.
func isMiniSWEAgent(obj map[string]json.RawMessage) bool {
	var tf string
	if json.Unmarshal(obj["trajectory_format"], &tf) == nil && strings.HasPrefix(tf, "mini-swe-agent") {
		return true
	}
	var info struct {
		MiniVersion string `json:"mini_version"`
	}
	_, msgs := obj["messages"]
	return msgs && json.Unmarshal(obj["info"], &info) == nil && info.MiniVersion != ""
}

// oaiUsage is usage in the OpenAI chat shape (litellm's too), as
// mini-swe-agent stores it in extra.response.usage.
type oaiUsage struct {
	PromptTokens        uint64 `json:"prompt_tokens"`
	CompletionTokens    uint64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens uint64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// Anthropic models through litellm report cache writes apart.
	CacheCreationInputTokens uint64 `json:"cache_creation_input_tokens"`
}

// canonical maps OpenAI usage to docs/design.md §2's: prompt tokens less the
// cached ones (and cache writes) are input, cached ones cache reads.
func (u *oaiUsage) canonical() *history.Usage {
	if u == nil {
		return nil
	}
	var cached uint64
	if u.PromptTokensDetails != nil {
		cached = u.PromptTokensDetails.CachedTokens
	}
	in := u.PromptTokens
	for _, sub := range []uint64{cached, u.CacheCreationInputTokens} {
		if sub <= in {
			in -= sub
		}
	}
	return usage(history.Usage{InputTokens: in, CacheReadInputTokens: cached, CacheCreationInputTokens: u.CacheCreationInputTokens, OutputTokens: u.CompletionTokens})
}

// miniExtra is the part of a mini-swe-agent message's "extra" read here.
type miniExtra struct {
	Extra *struct {
		Response *struct {
			Model string    `json:"model"`
			Usage *oaiUsage `json:"usage"`
		} `json:"response"`
	} `json:"extra"`
}

func importMiniSWEAgent(data []byte, opts Options) (*Transcript, error) {
	arr, base, _, err := messagesArray(data, "messages")
	if err != nil {
		return nil, err
	}
	elems, err := decodeArray(arr, base)
	if err != nil {
		return nil, err
	}
	b := newBuilder(FormatMiniSWEAgent)
	for _, e := range elems {
		var probe struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal(e.raw, &probe); err == nil && probe.Role == "exit" {
			// The run's end (exit status, submission): not a message a
			// model saw.
			continue
		}
		n := len(b.t.Messages)
		if err := openAIAppend(b, e.raw); err != nil {
			if err := badElement(b.t, opts, "message", e, err); err != nil {
				return nil, err
			}
			continue
		}
		var x miniExtra
		if json.Unmarshal(e.raw, &x) != nil || x.Extra == nil || x.Extra.Response == nil {
			continue
		}
		for i := n; i < len(b.t.Messages); i++ {
			if m := &b.t.Messages[i]; m.Role == history.RoleAssistant {
				m.Usage = x.Extra.Response.Usage.canonical()
				if r := x.Extra.Response; r.Model != "" && m.Model == "" {
					m.Model = r.Model
					b.t.Model = r.Model
				}
			}
		}
	}
	return b.t, nil
}

// importResponses imports a Responses API request body with the Codex
// rollout's item conversion (the items are the same).
func importResponses(data []byte, opts Options) (*Transcript, error) {
	var body struct {
		Model        string          `json:"model"`
		Instructions json.RawMessage `json:"instructions"`
		Input        json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, &MalformedError{Err: err}
	}
	s := &codexState{b: newBuilder(FormatOpenAIResponses), cur: -1, last: -1}
	if len(body.Instructions) > 0 {
		if sys, err := systemText(body.Instructions); err == nil {
			s.b.addSystem(sys)
		}
	}
	var text string
	if json.Unmarshal(body.Input, &text) == nil {
		s.b.user(textBlocks(text), zeroTime)
		s.b.t.Model = body.Model
		return s.b.t, nil
	}
	base := int64(bytes.Index(data, body.Input))
	elems, err := decodeArray(body.Input, max(base, 0))
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		if err := s.item(e.raw, zeroTime); err != nil {
			if err := badElement(s.b.t, opts, "input item", e, err); err != nil {
				return nil, err
			}
		}
	}
	if s.b.t.Model == "" {
		s.b.t.Model = body.Model
	}
	return s.b.t, nil
}

// splitGlued splits a JSONL line that holds several JSON values one after
// the other ("{…}{…}", as real pi files have) into one line per value, with
// the same line number. A line that is one value, or not JSON at all, is
// returned as is; complete values followed by a partial one give the
// complete ones plus the rest (cut if the line was).
func splitGlued(ln line) []line {
	if len(ln.text) == 0 || ln.text[0] != '{' || json.Valid(ln.text) {
		return []line{ln}
	}
	dec := json.NewDecoder(bytes.NewReader(ln.text))
	var out []line
	var at int64
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		end := dec.InputOffset()
		text := bytes.TrimSpace(ln.text[at:end])
		out = append(out, line{num: ln.num, off: ln.off + at, text: text})
		at = end
	}
	if len(out) < 2 && (len(out) == 0 || len(bytes.TrimSpace(ln.text[at:])) > 0) {
		return []line{ln}
	}
	if rest := bytes.TrimSpace(ln.text[at:]); len(rest) > 0 {
		out = append(out, line{num: ln.num, off: ln.off + at, text: rest, cut: ln.cut})
	} else {
		out[len(out)-1].cut = ln.cut
	}
	return out
}

// TrailingCall is a tool call a transcript ends with: no result follows it
// because the file ends there (the agent's last act — a final submit, or a
// run stopped while the tool ran).
type TrailingCall struct {
	// ID and Name are the call's.
	ID, Name string
}

// dropTrailingCalls is the one rule for a file that ends with tool calls and
// no results (docs/decisions.md "Tool calls a transcript ends with are
// left out"; used by import, replay and compact --transcript
// alike, since they all read transcripts through Import): those calls are
// removed from the last assistant message (the message itself too, when
// nothing else is left) and listed in Transcript.TrailingCalls. No result
// exists to replay or store, and an open round would be closed with an
// invented error result. Calls left open in the middle of a file are not
// touched (CloseAbandoned closes them).
func dropTrailingCalls(t *Transcript) {
	last := len(t.Messages) - 1
	if last < 0 || t.Messages[last].Role != history.RoleAssistant {
		return
	}
	m := &t.Messages[last]
	kept := m.Content[:0:0]
	for _, blk := range m.Content {
		if blk.Type == history.BlockToolCall {
			t.TrailingCalls = append(t.TrailingCalls, TrailingCall{ID: blk.ID, Name: blk.Name})
			t.ToolCalls--
			continue
		}
		kept = append(kept, blk)
	}
	if len(t.TrailingCalls) == 0 {
		return
	}
	if len(kept) == 0 {
		t.Messages = t.Messages[:last]
		t.Responses--
		return
	}
	m.Content = kept
}

// Notes are one-line remarks on an import for the commands to print:
// a cut last line, tool calls the file ends with, skipped lines.
func (t *Transcript) Notes() []string {
	var out []string
	if t.CutLine > 0 {
		out = append(out, fmt.Sprintf("the last line (%d) is cut short (the agent was still writing the file); it was skipped", t.CutLine))
	}
	if n := len(t.TrailingCalls); n > 0 {
		names := make([]string, n)
		for i, c := range t.TrailingCalls {
			names[i] = c.Name
		}
		out = append(out, fmt.Sprintf("the file ends with %d tool call%s that got no result (%s: the agent's last act); left out", n, map[bool]string{true: "", false: "s"}[n == 1], strings.Join(names, ", ")))
	}
	return out
}
