package openai

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
)

// CacheElements splits a Responses (responses true) or Chat Completions
// request body into what OpenAI's prompt cache compares, in its order:
// "tools", "instructions" (Responses), then each input item or message
// (a Responses input given as a string as the user message it is read as,
// inputItem), plain text in one form (wire.MatchForm: a string content,
// one text block and a Responses message item read alike).
// OpenAI caches every prefix automatically, so lastMarker is the last
// element's index. Errors: the body is not a request object.
func CacheElements(body []byte, responses bool) (elems [][]byte, lastMarker int, err error) {
	elems, lastMarker, _, err = Cache(body, responses)
	return elems, lastMarker, err
}

// Cache is CacheElements with the cache lifetime the body asks for, in
// seconds: prompt_cache_retention "24h" keeps the cache a day (86400);
// any other value, or none, is the provider's default (0). Errors: the
// body is not a request object.
func Cache(body []byte, responses bool) (elems [][]byte, lastMarker int, lifetime uint64, err error) {
	var f struct {
		Tools        json.RawMessage   `json:"tools"`
		Instructions json.RawMessage   `json:"instructions"`
		Input        json.RawMessage   `json:"input"`
		Messages     []json.RawMessage `json:"messages"`
		// Retention is decoded on its own: a value of another type is
		// the default lifetime, not an unreadable request.
		Retention json.RawMessage `json:"prompt_cache_retention"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, -1, 0, fmt.Errorf("not a request object: %w", err)
	}
	items := f.Messages
	head := []json.RawMessage{f.Tools}
	if responses {
		head = append(head, f.Instructions)
		items = nil
		if len(f.Input) > 0 && f.Input[0] == '[' {
			if err := json.Unmarshal(f.Input, &items); err != nil {
				return nil, -1, 0, fmt.Errorf("input: %w", err)
			}
		} else if len(f.Input) > 0 {
			items = []json.RawMessage{inputItem(rawjson.Compact(f.Input))}
		}
	}
	for i, e := range append(head, items...) {
		// The provider caches tokens, not the JSON's layout.
		e = rawjson.Compact(e)
		if i >= len(head) {
			// Nor the form of plain text (wire.MatchForm).
			e = wire.MatchForm(e)
		}
		elems = append(elems, e)
	}
	var retention string
	if json.Unmarshal(f.Retention, &retention) == nil && retention == "24h" {
		lifetime = 24 * 3600
	}
	return elems, len(elems) - 1, lifetime, nil
}

// inputItem is a Responses input given as a string, s, as the one user
// message the API reads it as, {"role":"user","content":s}: the item ctxd
// sends in its place. Another value is returned as it is.
func inputItem(s []byte) []byte {
	if len(s) == 0 || s[0] != '"' {
		return s
	}
	out := make([]byte, 0, len(s)+len(`{"role":"user","content":}`))
	out = append(out, `{"role":"user","content":`...)
	out = append(out, s...)
	return append(out, '}')
}
