package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire"
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

// decodeContentFirst is DecodeContent as it was written first: every
// content tried as a string before as an array.
func decodeContentFirst(raw json.RawMessage) ([]WireBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return nil, nil
		}
		return []WireBlock{{Type: "text", Text: s}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, fmt.Errorf("content is neither a string nor an array of blocks: %w", err)
	}
	blocks := make([]WireBlock, 0, len(raws))
	for i, r := range raws {
		var b WireBlock
		if err := json.Unmarshal(r, &b); err != nil {
			return nil, fmt.Errorf("content block %d: %w", i, err)
		}
		b.Raw = r
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// TestDecodeContentAsFirst: content of every shape (string, null, spaced,
// an array of blocks of any kind, a number, an object, not JSON) decodes
// to the same blocks and errors as when every content was tried as a
// string first.
func TestDecodeContentAsFirst(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(5, 6))}
	for i := range 5000 {
		raw := json.RawMessage(g.ws() + g.pick(g.text(), g.list(g.r.IntN(4), g.block), `null`, `1`, `{}`, `true`, `"\x01"`, `[1,`) + g.ws())
		if i%7 == 0 {
			raw = bytes.TrimSpace(raw)
		}
		got, gerr := DecodeContent(raw)
		want, werr := decodeContentFirst(raw)
		if !reflect.DeepEqual(got, want) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("%q: got %#v, %v; want %#v, %v", raw, got, gerr, want, werr)
		}
	}
}

// TestWireMessageAsUnmarshalled: a message read by the scan (and the
// content arrays split by it) is what json.Unmarshal reads, errors
// included, on messages of every shape the generator makes and on values
// that are not messages or not JSON.
func TestWireMessageAsUnmarshalled(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(7, 8))}
	odd := []string{`null`, `[1]`, `"s"`, `{"role":1}`, `{"role":"user","role":2}`, `{"ROLE":"user","Content":[]}`, `{"role":"user"`, `{"role":"u\u0073er","content":"x"}`, `{"r\u006fle":"assistant"}`, `{}`, ``, ` [ ] `, `[1,]`, `[{"a":1} , null ,"x"]`}
	for i := range 5000 {
		raw := g.ws() + g.message() + g.ws()
		if i < len(odd) {
			raw = odd[i]
		}
		got, gerr := decodeWireMessage(json.RawMessage(raw))
		var want WireMessage
		werr := json.Unmarshal([]byte(raw), &want)
		if !reflect.DeepEqual(got, want) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("%q: got %#v, %v; want %#v, %v", raw, got, gerr, want, werr)
		}
		for _, c := range []string{string(want.Content), raw} {
			var wa []json.RawMessage
			werr := json.Unmarshal([]byte(c), &wa)
			// Told the value is JSON (valid), only when it is.
			for _, valid := range []bool{false, json.Valid([]byte(c))} {
				ga, gerr := decodeArray(json.RawMessage(c), valid)
				if len(ga) != len(wa) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Fatalf("%q (valid %v): got %q, %v; want %q, %v", c, valid, ga, gerr, wa, werr)
				}
				for k := range wa {
					if !bytes.Equal(ga[k], wa[k]) {
						t.Fatalf("%q: element %d is %q, want %q", c, k, ga[k], wa[k])
					}
				}
			}
		}
	}
}

// TestMarkerFreeDigestAsReencoded: the digest cut from the marked
// encoding is the digest of the message encoded again without its
// markers (the way it was computed first), for ctxd's renderings of
// generated client messages (carried blocks, tool results with nested
// content, text that mentions markers) with markers on any of their blocks.
func TestMarkerFreeDigestAsReencoded(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(5, 6))}
	markers := []string{`{"type":"ephemeral"}`, `{"type":"ephemeral","ttl":"1h"}`, `{ "ttl" : "1h" }`, `{"a":{"nested":1}}`}
	fixed := []string{
		`{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"<a & b>"}},{"type":"text","text":"x"}]}`,
		`{"role":"assistant","content":[{"type":"compaction","content":"the summary"},{"type":"text","text":"<ok> & \u2028"}]}`,
		`{"role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{"q":"x"}},{"type":"web_search_tool_result","tool_use_id":"s1","content":[]}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"cache_reference":"r"}]}`,
	}
	cut := 0
	for n := range 20000 {
		raw := g.message()
		if n%4 == 0 {
			raw = fixed[n/4%len(fixed)]
		}
		ms, err := ParseMessage(json.RawMessage(raw), nil)
		if err != nil {
			continue
		}
		for _, m := range RenderWith("", nil, ms, Carry).Messages {
			marked := false
			for i := range m.Content {
				if g.r.IntN(3) == 0 {
					m.Content[i].CacheControl = json.RawMessage(markers[g.r.IntN(len(markers))])
					marked = true
				}
			}
			enc, err := json.Marshal(&m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := MarkerFreeDigest(&m, enc)
			if err != nil {
				t.Fatal(err)
			}
			want, err := reencodedDigest(&m)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s: the digest cut from the encoding differs from the re-encoded one", enc)
			}
			if _, ok := cutMarkers(&m, enc); ok && marked {
				cut++
			}
		}
	}
	if cut < 1000 {
		t.Fatalf("only %d marked messages were cut (the rest encoded again): the test does not reach the scan", cut)
	}
}

// TestBlockAsUnmarshalled: a content value known to be JSON (a message
// found valid) is read as json.Unmarshal reads it, block by block and as
// a string, whether decodeBlock reads a block or leaves it to
// json.Unmarshal (members in another case or twice, values of another
// type, escapes in names, null).
func TestBlockAsUnmarshalled(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(9, 10))}
	odd := []string{
		`{"type":"text","text":null}`, `{"type":"text","Text":"x"}`, `{"type":"text","text":"a","text":"b"}`,
		`{"type":"tool_use","id":"t","name":"n","input":null}`, `{"type":"tool_result","content":null}`,
		`{"type":"tool_result","is_error":1}`, `{"is_error":null}`, `{"is_error":true,"is_error":false}`,
		`{"type":"image","source":"x"}`, `{"source":null}`, `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}`,
		`{"type":"thinking","ſignature":"x"}`, `{"t\u0079pe":"text","text":"x"}`, `{"text":1}`, `{"text":"\ud83d and \u00e9\n"}`,
		"{\"text\":\"\xff\xfe\"}", `{"id":["x"]}`, `{"type":"tool_use","input":{"a":1},"cache_control":{"type":"ephemeral"}}`,
		`{"type":"tool_result","tool_use_id":"t1","content":"line 1\nline \"2\"\t\u2028","is_error":false}`,
		`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a\\b"},{"type":"image","source":{"type":"url","url":"u"}}]}`,
		`{"type":"redacted_thinking","data":"abc","DATA":"x"}`, `{}`, `null`, `"s"`, `[1]`, `1`,
	}
	for i := range 5000 {
		blk := g.block()
		if i < len(odd) {
			blk = odd[i]
		}
		for _, c := range []string{"[" + g.ws() + blk + g.ws() + "]", blk} {
			if !json.Valid([]byte(c)) {
				continue
			}
			got, gerr := decodeContent(json.RawMessage(c), true)
			want, werr := decodeContent(json.RawMessage(c), false)
			if !reflect.DeepEqual(got, want) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Fatalf("%s: read %#v, %v; json.Unmarshal reads %#v, %v", c, got, gerr, want, werr)
			}
			// A tool result's content, as a string too.
			if i%3 == 0 {
				s, _ := json.Marshal(c)
				got, gerr := decodeContent(s, true)
				want, werr := decodeContent(s, false)
				if !reflect.DeepEqual(got, want) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Fatalf("%s: read %#v, %v; json.Unmarshal reads %#v, %v", s, got, gerr, want, werr)
				}
			}
		}
	}
}

// A client's marker on a block inside a tool_result's content (text,
// search_result, document) is placed on ctxd's rendering of that block,
// the message goes out as the client's bytes, marker included, and its
// marker-free digest is the client message's key; the renderer's cached
// rendering is not touched. Where the marker cannot be placed so (the
// content's blocks differ in number), the client's message does not go
// out with it and the marker moves to the last block of the last message.
func TestNestedMarkerPlaced(t *testing.T) {
	const marker = `{"type":"ephemeral","ttl":"1h"}`
	for _, c := range []struct{ name, block string }{
		{"text", `{"type":"text","text":"hello"}`},
		{"search_result", `{"type":"search_result","source":"https://example.com","title":"t","content":[{"type":"text","text":"hello"}]}`},
		{"document", `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"hello"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			marked := c.block[:len(c.block)-1] + `,"cache_control":` + marker + `}`
			result := func(blocks ...string) json.RawMessage {
				return json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[` + strings.Join(blocks, ",") + `]}]}`)
			}
			raw := result(`{"type":"text","text":"first"}`, marked)
			ms, err := ParseMessage(raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			cached := RenderWith("", nil, ms, Carry).Messages
			out := slices.Clone(cached)
			out[0].Content = slices.Clone(out[0].Content) // as renderer.extend does
			PlaceMarkers(out, []json.RawMessage{raw}, nil)
			if cc := out[0].Content[0].Content[1].CacheControl; string(cc) != marker {
				t.Fatalf("nested marker %s, want %s", cc, marker)
			}
			if out[0].Content[0].CacheControl != nil || out[0].Content[0].Content[0].CacheControl != nil {
				t.Fatalf("a marker where the client put none: %+v", out[0].Content[0])
			}
			if cached[0].Content[0].Content[1].CacheControl != nil {
				t.Fatal("PlaceMarkers changed the cached rendering")
			}
			if got := ClientBytes(raw, &out[0], false, false, false); string(got) != string(raw) {
				t.Fatalf("sent as\n%s\nwant the client's\n%s", got, raw)
			}
			enc, err := EncodeMessage(&out[0])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(enc, []byte(`,"cache_control":`+marker+`}`)) {
				t.Fatalf("ctxd's encoding lacks the marker: %s", enc)
			}
			key, err := MarkerFreeDigest(&out[0], enc)
			if err != nil {
				t.Fatal(err)
			}
			if want, _, ok := ClientKey(raw); !ok || key != want {
				t.Fatal("the marker-free digest is not the client message's key")
			}

			// The client's content has a block more than ctxd's rendering
			// (an empty text it drops): its marker moves to the last
			// block, and the client's bytes do not go with it.
			raw2 := result(`{"type":"text","text":""}`, `{"type":"text","text":"first"}`, marked)
			ms, err = ParseMessage(raw2, nil)
			if err != nil {
				t.Fatal(err)
			}
			out = RenderWith("", nil, ms, Carry).Messages
			if n := len(out[0].Content[0].Content); n != 2 {
				t.Fatalf("rendered %d blocks of content, want 2", n)
			}
			PlaceMarkers(out, []json.RawMessage{raw2}, nil)
			if cc := out[0].Content[0].CacheControl; string(cc) != marker {
				t.Fatalf("the unplaced nested marker moved to %s, want %s on the tool_result", cc, marker)
			}
			if got := ClientBytes(raw2, &out[0], false, false, false); got != nil && bytes.Count(got, []byte(`"cache_control"`)) > 1 {
				t.Fatalf("sent with two markers: %s", got)
			}

			// Unmarked by PlaceMarkers (out of its reach): the client's
			// bytes go without the marker.
			if got := ClientBytes(raw, &cached[0], false, false, false); bytes.Contains(got, []byte("cache_control")) {
				t.Fatalf("a marker ctxd did not place went out: %s", got)
			}
		})
	}
}

// In a rewritten message, a tool_result kept as the client's block (it
// has a member the model lacks, cache_reference) carries in its content
// the markers PlaceMarkers placed there: the client's bytes when they are
// the client's markers, ctxd's content without a marker when none was
// placed (the client's block used to go with its marker regardless).
func TestClientResultCarriesPlacedNestedMarkers(t *testing.T) {
	block := `{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"hello","cache_control":{"type":"ephemeral"}}],"cache_reference":"c1"}`
	raw := json.RawMessage(`{"role":"user","content":[` + block + `]}`)
	idx, err := (&renderer{}).index(&wire.RenderRequest{Items: []json.RawMessage{raw}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := ParseMessage(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := RenderWith("", nil, ms, Carry).Messages
	if got, err := withClientResults(idx, &out[0]); err != nil || bytes.Contains(got, []byte("cache_control")) || !bytes.Contains(got, []byte(`"cache_reference":"c1"`)) {
		t.Fatalf("no marker placed: sent %s (%v), want the client's block without its marker", got, err)
	}
	PlaceMarkers(out, []json.RawMessage{raw}, nil)
	got, err := withClientResults(idx, &out[0])
	if err != nil || string(got) != string(raw) {
		t.Fatalf("marker placed: sent %s (%v), want the client's %s", got, err, raw)
	}
}

// PlaceMarkers takes the client's messages' marker flags when it is
// given them (wire.Digests.Marked, computed with the request's hashes)
// instead of searching each message for the key again: with the flags
// of HasMarker it places what the search places, and a message flagged
// as unmarked is not read.
func TestPlaceMarkersReadsTheFlags(t *testing.T) {
	raws := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":[{"type":"text","text":"first","cache_control":{"type":"ephemeral"}}]}`),
		json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"an answer"}]}`),
		json.RawMessage(`{"role":"user","content":[{"type":"text","text":"second","cache_control":{"type":"ephemeral","ttl":"1h"}}]}`),
	}
	render := func() []Message {
		var ms []history.Message
		for _, raw := range raws {
			m, err := ParseMessage(raw, nil)
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m...)
		}
		return RenderWith("", nil, ms, Carry).Messages
	}
	marked := make([]bool, len(raws))
	for i, raw := range raws {
		marked[i] = wire.HasMarker(raw)
	}
	searched, flagged := render(), render()
	PlaceMarkers(searched, raws, nil)
	PlaceMarkers(flagged, raws, marked)
	if !reflect.DeepEqual(searched, flagged) {
		t.Fatalf("with the flags: %+v\nsearched: %+v", flagged, searched)
	}
	if len(flagged[0].Content[0].CacheControl) == 0 || len(flagged[2].Content[0].CacheControl) == 0 {
		t.Fatalf("markers not placed: %+v", flagged)
	}
	// The first message flagged unmarked: its marker is not looked for.
	unread := render()
	PlaceMarkers(unread, raws, []bool{false, false, true})
	if len(unread[0].Content[0].CacheControl) != 0 || len(unread[2].Content[0].CacheControl) == 0 {
		t.Fatalf("flags not followed: %+v", unread)
	}
}
