package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"testing"
)

// ClientItems sends an outgoing item as the client's own bytes when it
// is ctxd's rendering of a client item read alone, ctxd's item
// otherwise (a rewritten one, a prefix item's), aligned from the end: an
// item twice in the list takes its own occurrence. Across requests it
// renders alone only the items it has not indexed: those after the first
// one whose bytes changed.
func TestClientItemsSendsTheClientsBytesOfWhatCtxdDidNotRewrite(t *testing.T) {
	// ctxd's rendering of an item is its bytes without spaces; the
	// client writes spaces.
	rendered := 0
	alone := func(items []json.RawMessage, k int) json.RawMessage {
		rendered++
		return bytes.ReplaceAll(items[k], []byte(" "), nil)
	}
	key := func(raw json.RawMessage) Digest { return sha256.Sum256(raw) }
	items := []json.RawMessage{
		json.RawMessage(`{"p": 0}`), // the prefix
		json.RawMessage(`{"a": 1}`),
		json.RawMessage(`{"b": 2}`),
		json.RawMessage(`{"a":  1}`),
	}
	var c ClientItems
	var d Digests
	send := func(items []json.RawMessage, out ...string) []string {
		t.Helper()
		ChainsWith(&d, items, nil)
		req := &RenderRequest{Items: items, Prefix: 1, Fast: d.Fast}
		o := make([]json.RawMessage, len(out))
		for i, s := range out {
			o[i] = json.RawMessage(s)
		}
		var got []string
		for _, r := range c.With(req, o, alone, key) {
			got = append(got, string(r))
		}
		return got
	}
	got := send(items, `{"a":1}`, `{"b":3}`, `{"a":1}`)
	want := []string{`{"a": 1}`, `{"b":3}`, `{"a":  1}`}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %q, want %q", got, want)
	}
	if rendered != 3 {
		t.Fatalf("%d items rendered alone, want the 3 after the prefix", rendered)
	}
	rendered = 0
	items = append(items[:2:2], json.RawMessage(`{"b": 4}`), json.RawMessage(`{"a": 1}`), json.RawMessage(`{"c": 5}`))
	got = send(items, `{"a":1}`, `{"b":4}`, `{"a":1}`, `{"c":5}`)
	if got[1] != `{"b": 4}` || got[3] != `{"c": 5}` {
		t.Fatalf("got %q", got)
	}
	if rendered != 3 {
		t.Fatalf("%d items rendered alone, want the 3 from the changed one on", rendered)
	}
	if c.Bytes() <= 0 {
		t.Fatalf("the index holds %d bytes", c.Bytes())
	}
}
