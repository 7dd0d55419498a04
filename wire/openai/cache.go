package openai

import (
	"encoding/json"
	"fmt"
)

// CacheElements splits a Responses (responses true) or Chat Completions
// request body into what OpenAI's prompt cache compares, in its order:
// "tools", "instructions" (Responses), then each input item or message.
// OpenAI caches every prefix automatically, so lastMarker is the last
// element's index. Errors: the body is not a request object.
func CacheElements(body []byte, responses bool) (elems [][]byte, lastMarker int, err error) {
	var f struct {
		Tools        json.RawMessage   `json:"tools"`
		Instructions json.RawMessage   `json:"instructions"`
		Input        json.RawMessage   `json:"input"`
		Messages     []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, -1, fmt.Errorf("not a request object: %w", err)
	}
	items := f.Messages
	head := []json.RawMessage{f.Tools}
	if responses {
		head = append(head, f.Instructions)
		items = nil
		if len(f.Input) > 0 && f.Input[0] == '[' {
			if err := json.Unmarshal(f.Input, &items); err != nil {
				return nil, -1, fmt.Errorf("input: %w", err)
			}
		} else if len(f.Input) > 0 {
			items = []json.RawMessage{f.Input}
		}
	}
	for _, e := range append(head, items...) {
		elems = append(elems, e)
	}
	return elems, len(elems) - 1, nil
}
