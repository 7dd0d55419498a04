package anthropic

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/wire"
)

// TestCacheElementsDropTheMovingMarker: the same message with and without
// the moving cache marker is one element, and the 1-hour lifetime is seen.
func TestCacheElementsDropTheMovingMarker(t *testing.T) {
	a := `{"model":"m","tools":[{"name":"Bash","cache_control":{"type":"ephemeral"}}],"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`
	b := `{"model":"m","system":"s","tools":[{"name":"Bash","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":[{"cache_control":{"type":"ephemeral"},"type":"text","text":"yo"}]}]}`
	ea, la, longA, err := CacheElements([]byte(a))
	if err != nil {
		t.Fatal(err)
	}
	eb, lb, longB, _ := CacheElements([]byte(b))
	if len(ea) != 3 || len(eb) != 4 || la != 2 || lb != 3 || !longA || longB {
		t.Fatalf("elements %d/%d, markers %d/%d, long %v/%v", len(ea), len(eb), la, lb, longA, longB)
	}
	for i := range ea {
		if string(ea[i]) != string(eb[i]) {
			t.Errorf("element %d differs: %s vs %s", i, ea[i], eb[i])
		}
		if strings.Contains(string(ea[i]), "cache_control") {
			t.Errorf("element %d keeps its marker: %s", i, ea[i])
		}
	}
	// Its one text block, bare once the marker is gone, is plain text in
	// its one form (wire.MatchForm).
	if string(eb[3]) != `{"role":"assistant","content":"yo"}` {
		t.Errorf("a leading marker left %s", eb[3])
	}
	if _, _, _, err := CacheElements([]byte(`[1]`)); err == nil {
		t.Error("an array is a Messages request")
	}
}

// TestUsageSplitsCacheWritesByLifetime: usage.cache_creation's 5-minute and
// 1-hour writes, in a body (the corpus's shape) and in a stream's
// message_delta.
func TestUsageSplitsCacheWritesByLifetime(t *testing.T) {
	body := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_creation_input_tokens":1331,"cache_read_input_tokens":14874,"cache_creation":{"ephemeral_5m_input_tokens":331,"ephemeral_1h_input_tokens":1000},"output_tokens":3,"service_tier":"standard"}}`
	r, err := DecodeResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	u := r.Message().Usage
	if u == nil || u.CacheCreationInputTokens != 1331 || u.CacheCreation1hInputTokens != 1000 || u.CacheReadInputTokens != 14874 {
		t.Fatalf("usage %+v", u)
	}
	s := NewStreamReader()
	_, _ = s.Write([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":0,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"cache_creation_input_tokens\":70,\"cache_creation\":{\"ephemeral_5m_input_tokens\":20,\"ephemeral_1h_input_tokens\":50},\"output_tokens\":9}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	resp, err := s.Response()
	if err != nil {
		t.Fatal(err)
	}
	if u := resp.Message().Usage; u == nil || u.CacheCreationInputTokens != 70 || u.CacheCreation1hInputTokens != 50 || u.OutputTokens != 9 {
		t.Fatalf("stream usage %+v", u)
	}
}

// cacheElementsByDecoding is CacheElements as it was written first: the
// body decoded by encoding/json, the markers removed by a regular
// expression. The scanner's result must equal it on every JSON body.
func cacheElementsByDecoding(body []byte) (elems [][]byte, lastMarker int, long bool, err error) {
	var f struct {
		Tools    json.RawMessage   `json:"tools"`
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, -1, false, err
	}
	lastMarker = -1
	for i, e := range append([]json.RawMessage{f.Tools, f.System}, f.Messages...) {
		var compact bytes.Buffer
		if json.Compact(&compact, e) == nil {
			e = compact.Bytes()
		}
		if bytes.Contains(e, []byte(`"cache_control"`)) {
			lastMarker = i
			long = long || longTTL.Match(e)
			e = markersByRegexp(e)
		}
		if i >= 2 {
			e = wire.MatchForm(e)
		}
		elems = append(elems, e)
	}
	return elems, lastMarker, long, nil
}

var cacheMarkerRegexp = regexp.MustCompile(`,?\s*"cache_control"\s*:\s*\{[^{}]*\}\s*,?`)

func markersByRegexp(e []byte) []byte {
	return cacheMarkerRegexp.ReplaceAllFunc(e, func(m []byte) []byte {
		if m[0] == ',' && m[len(m)-1] == ',' {
			return []byte(",")
		}
		return nil
	})
}

// gen makes Messages request bodies and messages with markers anywhere a
// client may put them (first, last, between members, nested, spaced, null),
// text that mentions them, and members in any order and case.
type gen struct{ r *rand.Rand }

func (g gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g gen) ws() string               { return g.pick("", "", " ", "\n  ", "\t", " \r\n") }

func (g gen) marker() string {
	return g.pick(`"cache_control"`, `"cache_control"`, `"Cache_Control"`) + g.ws() + ":" + g.ws() +
		g.pick(`{"type":"ephemeral"}`, `{"type":"ephemeral","ttl":"1h"}`, `{ "ttl" : "1h" }`, `{}`, `{"a":{"nested":1}}`, `null`)
}

func (g gen) text() string {
	return g.pick(`"hi"`, `"say \"cache_control\": {} please"`, `"cache_control"`, `"{ } , \\"`, `"\u00e9 \\\" x"`, `""`)
}

func (g gen) object(members ...string) string {
	for range g.r.IntN(3) / 2 * (1 + g.r.IntN(2)) {
		members = append(members, g.marker())
	}
	g.r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	var b strings.Builder
	b.WriteString("{" + g.ws())
	for i, m := range members {
		if i > 0 {
			b.WriteString(g.ws() + "," + g.ws())
		}
		b.WriteString(m)
	}
	b.WriteString(g.ws() + "}")
	return b.String()
}

func (g gen) block() string {
	switch g.r.IntN(5) {
	case 0:
		return g.object(`"type":"tool_use"`, `"id":"t1"`, `"name":"Bash"`, `"input":`+g.object(`"cache_control":`+g.text(), `"x":[1,{"y":null}]`))
	case 1:
		return g.object(`"type":"tool_result"`, `"tool_use_id":"t1"`, `"content":[`+g.object(`"type":"text"`, `"text":`+g.text())+`]`)
	case 2:
		return g.pick(`null`, `"a string"`, `1`)
	}
	return g.object(`"type":"text"`, `"text":`+g.text())
}

func (g gen) list(n int, f func() string) string {
	var xs []string
	for range n {
		xs = append(xs, f())
	}
	return "[" + g.ws() + strings.Join(xs, g.ws()+","+g.ws()) + g.ws() + "]"
}

func (g gen) message() string {
	members := []string{g.pick(`"role"`, `"Role"`) + ":" + g.pick(`"user"`, `"assistant"`, `"user"`, `null`, `3`)}
	if g.r.IntN(8) > 0 {
		members = append(members, `"content":`+g.pick(g.text(), g.list(g.r.IntN(4), g.block), g.list(1+g.r.IntN(3), g.block), `null`))
	}
	if g.r.IntN(10) == 0 {
		members = append(members, `"role":"assistant"`)
	}
	return g.object(members...)
}

func randomBody(r *rand.Rand) []byte {
	g := gen{r}
	members := []string{`"model":"m"`, `"max_tokens":8`}
	if r.IntN(4) > 0 {
		members = append(members, g.pick(`"tools"`, `"Tools"`)+":"+g.pick(`null`, g.list(r.IntN(3), func() string { return g.object(`"name":"Bash"`) })))
	}
	if r.IntN(4) > 0 {
		members = append(members, `"system":`+g.pick(`null`, g.text(), g.list(r.IntN(3), g.block)))
	}
	if r.IntN(8) > 0 {
		members = append(members, g.pick(`"messages"`, `"MESSAGES"`)+":"+g.pick(`null`, g.list(r.IntN(6), g.message)))
	}
	if r.IntN(10) == 0 {
		members = append(members, `"messages":`+g.list(1, g.message))
	}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return []byte(g.ws() + "{" + strings.Join(members, ","+g.ws()) + "}" + g.ws())
}

// TestCacheElementsAsDecoded: on JSON bodies of every shape the generator
// makes, the scanner's elements, last marker and lifetime are the ones
// decoding and the regular expression give, and a marker is removed
// wherever it stood.
func TestCacheElementsAsDecoded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	markers := 0
	for i := range 5000 {
		body := randomBody(r)
		if !json.Valid(body) {
			t.Fatalf("body %d is not JSON: %s", i, body)
		}
		want, wl, wlong, werr := cacheElementsByDecoding(body)
		got, gl, glong, gerr := CacheElements(body)
		if (werr != nil) != (gerr != nil) || gl != wl || glong != wlong || len(got) != len(want) {
			t.Fatalf("body %s: got %d elements, marker %d, long %v, err %v; want %d, %d, %v, %v", body, len(got), gl, glong, gerr, len(want), wl, wlong, werr)
		}
		for j := range want {
			if !bytes.Equal(got[j], want[j]) {
				t.Fatalf("body %s: element %d is %q, want %q", body, j, got[j], want[j])
			}
		}
		if wl >= 0 {
			markers++
		}
	}
	if markers < 1000 {
		t.Fatalf("only %d bodies with a marker", markers)
	}
	for _, body := range []string{`null`, ` null `, `{}`, `{"messages":null}`, `{"messages":[]}`, `{"messages":{}}`, `{"messages":"x"}`, `[1]`, `"s"`} {
		want, wl, _, werr := cacheElementsByDecoding([]byte(body))
		got, gl, _, gerr := CacheElements([]byte(body))
		if (werr != nil) != (gerr != nil) || gl != wl || len(got) != len(want) {
			t.Errorf("%s: got %q, %d, %v; want %q, %d, %v", body, got, gl, gerr, want, wl, werr)
		}
	}
}

// FuzzWithoutMarkers: removing the markers by hand is the regular
// expression's replacement on any bytes.
func FuzzWithoutMarkers(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"cache_control":{"type":"ephemeral"},"b":2}`,
		`{"cache_control":{},"cache_control":{} ,"b":2}`,
		`, "cache_control" : {"x":"}"} , ,"cache_control":{}`,
		`"cache_control":{"a":{}}, "cache_control":{}`,
		"\f\"cache_control\"\f:\f{}\f,",
		`"cache_control""cache_control":{}`,
		`x,,"cache_control":{"ttl":"1h"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := withoutMarkers(b), markersByRegexp(b); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %q, want %q", b, got, want)
		}
	})
}

// BenchmarkCacheElements: a ~900 KB body of 40 tool rounds of ~21 KB, the
// system prompt, the tools and the newest message marked (Claude Code's
// shape), read by the scanner (scan) and by decoding and the regular
// expression (decode).
func BenchmarkCacheElements(b *testing.B) {
	result := strings.Repeat(`line of tool output with \"quotes\" and {braces}\n`, 420)
	var msgs []string
	for i := range 40 {
		msgs = append(msgs, `{"role":"assistant","content":[{"type":"tool_use","id":"t`+strconv.Itoa(i)+`","name":"Bash","input":{"command":"ls"}}]}`)
		marker := ""
		if i == 39 {
			marker = `,"cache_control":{"type":"ephemeral"}`
		}
		msgs = append(msgs, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t`+strconv.Itoa(i)+`","content":"`+result+`"`+marker+`}]}`)
	}
	body := []byte(`{"model":"m","max_tokens":8,"tools":[{"name":"Bash","input_schema":{},"cache_control":{"type":"ephemeral"}}],"system":[{"type":"text","text":"` + strings.Repeat("s", 24000) + `","cache_control":{"type":"ephemeral"}}],"messages":[` + strings.Join(msgs, ",") + `]}`)
	for _, c := range []struct {
		name string
		f    func([]byte) ([][]byte, int, bool, error)
	}{{"scan", CacheElements}, {"decode", cacheElementsByDecoding}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, last, _, err := c.f(body); err != nil || last != 81 {
					b.Fatal(last, err)
				}
			}
		})
	}
}

// TestCacheElementsPlainTextOneForm: a message of plain text is one
// element whichever form the client wrote it in, a string or one text
// block (marked or not): the provider reads both alike, and the ledger's
// measure must not count the form.
func TestCacheElementsPlainTextOneForm(t *testing.T) {
	str := `{"model":"m","messages":[{"role":"user","content":"Hello there"}]}`
	block := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Hello there","cache_control":{"type":"ephemeral"}}]}]}`
	es, _, _, err := CacheElements([]byte(str))
	if err != nil {
		t.Fatal(err)
	}
	eb, _, _, _ := CacheElements([]byte(block))
	if len(es) != 3 || len(eb) != 3 || string(es[2]) != string(eb[2]) || string(es[2]) != `{"role":"user","content":"Hello there"}` {
		t.Fatalf("string form %q, block form %q", es, eb)
	}
}
