package anthropic

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
)

// markerKey is the key of a cache marker.
var markerKey = []byte(`"cache_control"`)

// longTTL matches a marker asking for the 1-hour lifetime.
var longTTL = regexp.MustCompile(`"cache_control"\s*:\s*\{[^{}]*"ttl"\s*:\s*"1h"`)

// CacheElements splits a Messages request body into what the prompt cache
// compares, in its order: "tools", "system", then each message, each as its
// JSON with the cache_control markers removed (a marker that moves from one
// message to the next changes no element). lastMarker is the index of the
// last element that carried a marker (-1: none, nothing is written);
// long reports a marker with "ttl": "1h". A message of plain text is in
// one form (wire.MatchForm: its content as a string, whether the client
// wrote a string or one text block): the provider reads both alike, and
// ctxd sends one form for both (PlainBytes), so the form is no context.
// Errors: the body is not a Messages request object.
//
// The body is split by its top-level structure (rawjson), not decoded: the
// bodies read are ones the upstream accepted (the client's, and ctxd's own
// encoding), and a value inside an element is not checked. The elements
// share body's bytes, except those whose markers were removed.
func CacheElements(body []byte) (elems [][]byte, lastMarker int, long bool, err error) {
	tools, system, msgs, err := cacheParts(body)
	if err != nil {
		return nil, -1, false, fmt.Errorf("not a Messages request: %w", err)
	}
	lastMarker = -1
	elems = make([][]byte, 0, 2+len(msgs))
	elems = append(elems, tools, system)
	elems = append(elems, msgs...)
	for i, e := range elems {
		// The provider caches tokens, not the JSON's layout: a client's
		// white space between tokens is not context.
		e = rawjson.Compact(e)
		elems[i] = e
		if bytes.Contains(e, markerKey) {
			lastMarker = i
			long = long || longTTL.Match(e)
			elems[i] = withoutMarkers(e)
		}
		if i >= 2 {
			elems[i] = wire.MatchForm(elems[i])
		}
	}
	return elems, lastMarker, long, nil
}

// cacheParts reads body's "tools", "system" and "messages" members as
// encoding/json reads them into raw fields: keys matched without regard to
// case, the last of a repeated key kept, a null body or member as absent
// for messages and as the bytes null for the others.
func cacheParts(body []byte) (tools, system []byte, msgs [][]byte, err error) {
	i := rawjson.SkipSpace(body, 0)
	if bytes.HasPrefix(body[i:], []byte("null")) && rawjson.SkipSpace(body, i+4) == len(body) {
		return nil, nil, nil, nil
	}
	var bad error
	ok := rawjson.Members(body, func(key string, vs, ve int) bool {
		v := body[vs:ve]
		switch {
		case bytes.EqualFold([]byte(key), []byte("tools")):
			tools = v
		case bytes.EqualFold([]byte(key), []byte("system")):
			system = v
		case bytes.EqualFold([]byte(key), []byte("messages")):
			if string(v) == "null" {
				msgs = nil
				return true
			}
			ms, err := rawjson.SplitArray(v)
			if err != nil {
				bad = fmt.Errorf("messages: %w", err)
				return false
			}
			msgs = msgs[:0]
			for _, m := range ms {
				msgs = append(msgs, m)
			}
		}
		return true
	})
	if bad != nil {
		return nil, nil, nil, bad
	}
	if !ok {
		return nil, nil, nil, errors.New("not a JSON object")
	}
	return tools, system, msgs, nil
}

// withoutMarkers is e with each cache_control member removed: what the
// expression ,?\s*"cache_control"\s*:\s*\{[^{}]*\}\s*,? matches, leftmost
// first, replaced by a comma when it starts and ends with one (a member
// between two others), else by nothing. A copy; e is not changed.
func withoutMarkers(e []byte) []byte {
	var out []byte
	done := 0 // e[:done] is in out, or was removed: where a match may start
	from := 0 // where the next key is looked for
	for {
		q := bytes.Index(e[from:], markerKey)
		if q < 0 {
			break
		}
		q += from
		end, ok := markerEnd(e, q+len(markerKey))
		if !ok {
			from = q + 1
			continue
		}
		start := q
		for start > done && reSpace(e[start-1]) {
			start--
		}
		if start > done && e[start-1] == ',' {
			start--
		}
		if out == nil {
			out = make([]byte, 0, len(e))
		}
		out = append(out, e[done:start]...)
		if e[start] == ',' && e[end-1] == ',' {
			out = append(out, ',')
		}
		done, from = end, end
	}
	if out == nil {
		return e
	}
	return append(out, e[done:]...)
}

// markerEnd matches \s*:\s*\{[^{}]*\}\s*,? at e[i:] (greedy), returning
// the offset just past it.
func markerEnd(e []byte, i int) (int, bool) {
	i = skipReSpace(e, i)
	if i >= len(e) || e[i] != ':' {
		return 0, false
	}
	i = skipReSpace(e, i+1)
	if i >= len(e) || e[i] != '{' {
		return 0, false
	}
	k := bytes.IndexAny(e[i+1:], "{}")
	if k < 0 || e[i+1+k] != '}' {
		return 0, false
	}
	i = skipReSpace(e, i+1+k+1)
	if i < len(e) && e[i] == ',' {
		i++
	}
	return i, true
}

// reSpace is \s of Go's regexp: JSON's white space and the form feed.
func reSpace(c byte) bool { return rawjson.IsSpace(c) || c == '\f' }

// skipReSpace returns the offset of the first byte at or after i that is
// not reSpace.
func skipReSpace(b []byte, i int) int {
	for i < len(b) && reSpace(b[i]) {
		i++
	}
	return i
}
