package anthropic

import (
	"encoding/json"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// A search_result block is the Messages API's search result with source
// attribution: what a retrieval tool returns (in a tool_result's content)
// or a client puts in a user message, {"type":"search_result","source":S,
// "title":T,"content":[{"type":"text","text":…},…],"citations":…}. It is
// a tool's output, so ctxd reads it as the text the model reads in it — a
// text block holding its title, its source and its texts — that keeps the
// client's bytes (history.Block.Raw): the estimate counts that text, a
// large result is offloaded and elided like any text result, the summary
// prompt and recall read it as text, and the block is rendered back as the
// client's bytes while it still holds that text (a rewrite, an offload
// stub, is rendered from its fields). A search_result this does not read
// (no text, a source that is not a string, a content block that is not
// text) stays a json block, carried whole as before.

// typeSearchResult is the block's type on the wire.
const typeSearchResult = "search_result"

// searchResult is the canonical form of the search_result block b: a text
// block of its text with the client's bytes (its cache marker cut; the
// marker is placed again like every marker); ok is false when b is not a
// search_result this reads.
func (b WireBlock) searchResult() (history.Block, bool) {
	if b.Type != typeSearchResult {
		return history.Block{}, false
	}
	raw := clientRaw(b.Raw)
	text, ok := searchResultText(raw)
	if !ok {
		return history.Block{}, false
	}
	return history.Block{Type: history.BlockText, Text: text, Raw: raw}, true
}

// searchResultText is the text the model reads in the search_result block
// raw: its title, its source, then each of its texts, one per paragraph
// (blank ones left out). ok is false when raw is not a search_result, its
// source or title is not a string, a block of its content is not text,
// or the text is blank (the API refuses a blank text block, and ctxd's
// renderers drop one).
func searchResultText(raw json.RawMessage) (string, bool) {
	var v struct {
		Type    string          `json:"type"`
		Source  json.RawMessage `json:"source"`
		Title   json.RawMessage `json:"title"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v.Type != typeSearchResult {
		return "", false
	}
	var source, title string
	if (len(v.Source) > 0 && json.Unmarshal(v.Source, &source) != nil) ||
		(len(v.Title) > 0 && json.Unmarshal(v.Title, &title) != nil) {
		return "", false
	}
	var s strings.Builder
	para := func(p string, sep string) {
		if strings.TrimSpace(p) == "" {
			return
		}
		if s.Len() > 0 {
			s.WriteString(sep)
		}
		s.WriteString(p)
	}
	para(title, "\n")
	para(source, "\n")
	for _, c := range v.Content {
		if c.Type != "text" {
			return "", false
		}
		para(c.Text, "\n\n")
	}
	if strings.TrimSpace(s.String()) == "" {
		return "", false
	}
	return s.String(), true
}

// carriedSearchResult is the text block b rendered as the client's
// search_result block (Block.Raw), when b keeps one (history.Block.Raw)
// that still holds b's text; ok is false otherwise.
func carriedSearchResult(b history.Block) (Block, bool) {
	if b.Type != history.BlockText || len(b.Raw) == 0 {
		return Block{}, false
	}
	if text, ok := searchResultText(b.Raw); !ok || text != b.Text {
		return Block{}, false
	}
	return Block{Type: typeSearchResult, Raw: b.Raw}, true
}
