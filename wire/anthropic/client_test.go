package anthropic

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// markersByDecoding is clientMarkers as it was written first: the message
// and its content decoded by encoding/json.
func markersByDecoding(raw json.RawMessage) (role string, cc []json.RawMessage, any bool) {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return "", nil, false
	}
	var blocks []struct {
		CacheControl json.RawMessage `json:"cache_control"`
	}
	if len(m.Content) == 0 || m.Content[0] != '[' || json.Unmarshal(m.Content, &blocks) != nil {
		return m.Role, nil, false
	}
	for _, b := range blocks {
		cc = append(cc, b.CacheControl)
		any = any || len(b.CacheControl) > 0
	}
	return m.Role, cc, any
}

// TestClientMarkersAsDecoded: reading only the role, the content and the
// blocks' markers gives what decoding the message gives, on messages of
// every shape the generator makes (a role or block of the wrong type, a
// null, repeated and differently cased keys).
func TestClientMarkersAsDecoded(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(3, 4))}
	withMarkers := 0
	for range 20000 {
		raw := json.RawMessage(g.ws() + g.message() + g.ws())
		if !json.Valid(raw) {
			t.Fatalf("not JSON: %s", raw)
		}
		role, cc, any := clientMarkers(raw)
		wrole, wcc, wany := markersByDecoding(raw)
		if role != wrole || any != wany || len(cc) != len(wcc) {
			t.Fatalf("%s: got %q %q %v, want %q %q %v", raw, role, cc, any, wrole, wcc, wany)
		}
		for i := range cc {
			if !bytes.Equal(cc[i], wcc[i]) || (cc[i] == nil) != (wcc[i] == nil) {
				t.Fatalf("%s: marker %d is %q, want %q", raw, i, cc[i], wcc[i])
			}
		}
		if wany {
			withMarkers++
		}
	}
	if withMarkers < 2000 {
		t.Fatalf("only %d messages with a marker", withMarkers)
	}
}
