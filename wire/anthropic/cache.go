package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
)

// cacheMarker matches a cache_control field of an element's JSON, with the
// comma that separates it from the field before it (the encoder puts it
// last, a client may put it anywhere).
var cacheMarker = regexp.MustCompile(`,?\s*"cache_control"\s*:\s*\{[^{}]*\}\s*,?`)

// longTTL matches a marker asking for the 1-hour lifetime.
var longTTL = regexp.MustCompile(`"cache_control"\s*:\s*\{[^{}]*"ttl"\s*:\s*"1h"`)

// CacheElements splits a Messages request body into what the prompt cache
// compares, in its order: "tools", "system", then each message, each as its
// JSON with the cache_control markers removed (a marker that moves from one
// message to the next changes no element). lastMarker is the index of the
// last element that carried a marker (-1: none, nothing is written);
// long reports a marker with "ttl": "1h". Errors: the body is not a
// Messages request object.
func CacheElements(body []byte) (elems [][]byte, lastMarker int, long bool, err error) {
	var f struct {
		Tools    json.RawMessage   `json:"tools"`
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, -1, false, fmt.Errorf("not a Messages request: %w", err)
	}
	lastMarker = -1
	elems = make([][]byte, 0, 2+len(f.Messages))
	for i, e := range append([]json.RawMessage{f.Tools, f.System}, f.Messages...) {
		if bytes.Contains(e, []byte(`"cache_control"`)) {
			lastMarker = i
			long = long || longTTL.Match(e)
			e = cacheMarker.ReplaceAllFunc(e, func(m []byte) []byte {
				if m[0] == ',' && m[len(m)-1] == ',' {
					return []byte(",")
				}
				return nil
			})
		}
		elems = append(elems, e)
	}
	return elems, lastMarker, long, nil
}
