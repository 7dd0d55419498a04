package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Anthropic's server-side compaction as the fake implements it (ctxd's
// shape "server", docs/design.md §10): the request's context_management edit
// {"type":"compact_20260112","trigger":{"type":"input_tokens","value":N}}
// under the anthropic-beta CompactBeta. A request whose billed tokens
// exceed N is answered with a "compaction" block (Config.CompactionSummary)
// before the scripted answer; a later request that sends a compaction block
// back is billed, and checked against the window, from that block on (the
// API drops everything before it).
const (
	// CompactEdit is the context_management edit type of server compaction.
	CompactEdit = "compact_20260112"
	// CompactBeta is the anthropic-beta value the edit requires.
	CompactBeta = "compact-2026-01-12"
	// CompactMinTrigger is the smallest trigger value the API accepts, in
	// tokens.
	CompactMinTrigger = 50000
)

// Refusal texts of the compaction edit (modelled on the API's validation
// messages for the beta header and for a field's bounds).
const (
	msgUnknownBeta     = "Unexpected value(s) `%s` for the `anthropic-beta` header. Please consult our documentation at docs.claude.com or try again without the header."
	msgEditNeedsBeta   = "context_management.edits.0: the edit type '%s' requires the beta header '%s'"
	msgTriggerTooSmall = "context_management.edits.0.trigger.value: Input should be greater than or equal to %d"
)

// compactEdit reads the request's compaction edit: its trigger in tokens,
// and whether there is one.
func compactEdit(body []byte) (trigger int, ok bool) {
	var f struct {
		CM *struct {
			Edits []struct {
				Type    string `json:"type"`
				Trigger *struct {
					Type  string `json:"type"`
					Value int    `json:"value"`
				} `json:"trigger"`
			} `json:"edits"`
		} `json:"context_management"`
	}
	if json.Unmarshal(body, &f) != nil || f.CM == nil {
		return 0, false
	}
	for _, e := range f.CM.Edits {
		if e.Type == CompactEdit {
			trigger = 150000 // the API's default
			if e.Trigger != nil {
				trigger = e.Trigger.Value
			}
			return trigger, true
		}
	}
	return 0, false
}

// hasBeta reports whether the request's anthropic-beta headers name beta.
func hasBeta(h http.Header, beta string) bool {
	for _, v := range h.Values("anthropic-beta") {
		for _, b := range strings.Split(v, ",") {
			if strings.TrimSpace(b) == beta {
				return true
			}
		}
	}
	return false
}

// admitCompaction refuses a compaction edit the fake is not configured
// for, or one that breaks the API's rules.
func (p *Provider) admitCompaction(h http.Header, body []byte) *APIError {
	trigger, ok := compactEdit(body)
	switch {
	case !ok && hasBeta(h, CompactBeta) && !p.cfg.ServerCompaction:
		return invalidRequest(msgUnknownBeta, CompactBeta)
	case !ok:
		return nil
	case !p.cfg.ServerCompaction && hasBeta(h, CompactBeta):
		return invalidRequest(msgUnknownBeta, CompactBeta)
	case !hasBeta(h, CompactBeta):
		return invalidRequest(msgEditNeedsBeta, CompactEdit, CompactBeta)
	case trigger < CompactMinTrigger:
		return invalidRequest(msgTriggerTooSmall, CompactMinTrigger)
	}
	return nil
}

// billedTokens is CountTokens of a Messages request from its last
// compaction block on (the API drops what precedes it): the system and
// tools, the message holding the block from the block on, and every
// message after it.
func billedTokens(body []byte, r *MessagesRequest) int {
	mi, bi := -1, -1
	for i := len(r.Messages) - 1; i >= 0 && mi < 0; i-- {
		for j := len(r.Messages[i].Content.Blocks) - 1; j >= 0; j-- {
			if r.Messages[i].Content.Blocks[j].Type == "compaction" {
				mi, bi = i, j
				break
			}
		}
	}
	if mi < 0 {
		return CountTokens(body)
	}
	var f map[string]json.RawMessage
	_ = json.Unmarshal(body, &f)
	n := len(f["system"]) + len(f["tools"])
	first := r.Messages[mi]
	first.Content = Content{Blocks: first.Content.Blocks[bi:]}
	b, _ := json.Marshal(append([]Message{first}, r.Messages[mi+1:]...))
	return (n + len(b) + 3) / 4
}

// Compactions returns the requests the fake answered with a compaction
// block.
func (p *Provider) Compactions() []Request {
	var out []Request
	for _, r := range p.Requests() {
		if r.Compacted {
			out = append(out, r)
		}
	}
	return out
}

// billedResponses is countOpenAI of a Responses request from its last
// compaction input item on (the API drops what precedes it).
func billedResponses(body []byte) int {
	var f struct {
		Instructions json.RawMessage   `json:"instructions"`
		Tools        json.RawMessage   `json:"tools"`
		Input        []json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &f) != nil {
		return countOpenAI(body)
	}
	last := -1
	for i, it := range f.Input {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(it, &t) == nil && t.Type == "compaction" {
			last = i
		}
	}
	if last < 0 {
		return countOpenAI(body)
	}
	in, _ := json.Marshal(f.Input[last:])
	return (len(f.Instructions) + len(f.Tools) + len(in) + 3) / 4
}
