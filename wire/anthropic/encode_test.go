package anthropic

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestEncodeMessageAsMarshal: EncodeMessage writes json.Marshal's bytes,
// for ctxd's renderings of generated client messages (with markers on any
// block) and for messages with every kind of block and field, strings of
// every byte (control characters, quotes, <, > and &, invalid UTF-8,
// U+2028 and U+2029), spaced raw JSON, nested results, no content.
func TestEncodeMessageAsMarshal(t *testing.T) {
	check := func(m *Message) {
		t.Helper()
		want, werr := json.Marshal(m)
		got, err := EncodeMessage(m)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%+v: error %v, json.Marshal's %v", m, err, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	}
	var every []byte
	for c := range 256 {
		every = append(every, byte(c))
	}
	strs := []string{"", "plain", string(every), "a\u2028b\u2029c", "<a href=\"x\">&amp;</a>", "\xff\xfe", "\x00\t\n\r\b\f\\\"", "é日本\U0001F600", "x\xe2\x80"}
	raws := []string{`{"a": [1, 2 , {"b" : "<&>"}] }`, `{}`, `null`, "{\"s\":\"\u2028\"}", `{"type":"ephemeral"}`, ` { "ttl" : "1h" } `}
	r := rand.New(rand.NewPCG(7, 8))
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	var block func(depth int) Block
	block = func(depth int) Block {
		b := Block{Type: pick([]string{"text", "tool_use", "tool_result", "thinking", "image", "x<y"})}
		switch r.IntN(4) {
		case 0:
			b.Raw = json.RawMessage(`{"type":"document", "source":{"data":` + string(mustJSON(pick(strs))) + `}}`)
		case 1:
			b.Type, b.Compaction = "compaction", pick(strs)
		default:
			for _, f := range []*string{&b.Text, &b.Thinking, &b.Signature, &b.Data, &b.ID, &b.Name, &b.ToolUseID} {
				if r.IntN(3) == 0 {
					*f = pick(strs)
				}
			}
			if r.IntN(3) == 0 {
				b.Input = json.RawMessage(pick(raws))
			}
			if depth < 2 && r.IntN(3) == 0 {
				for range r.IntN(3) {
					b.Content = append(b.Content, block(depth+1))
				}
			}
			b.IsError = r.IntN(4) == 0
			if r.IntN(5) == 0 {
				b.Source = &Source{Type: "base64", MediaType: "image/png", Data: pick(strs)}
			}
		}
		if r.IntN(3) == 0 {
			b.CacheControl = json.RawMessage(pick(raws))
		}
		return b
	}
	check(&Message{Role: "user"})
	check(&Message{Role: "user", Content: []Block{}})
	check(&Message{Role: "user", Content: []Block{{Type: "tool_use", Input: json.RawMessage(`{"a":}`)}}})
	for range 5000 {
		m := Message{Role: pick([]string{"user", "assistant", "<x>"})}
		for range r.IntN(4) {
			m.Content = append(m.Content, block(0))
		}
		check(&m)
	}
	g := gen{rand.New(rand.NewPCG(9, 10))}
	for range 20000 {
		ms, err := ParseMessage(json.RawMessage(g.message()), nil)
		if err != nil {
			continue
		}
		for _, m := range RenderWith("", nil, ms, Carry).Messages {
			for i := range m.Content {
				if g.r.IntN(3) == 0 {
					m.Content[i].CacheControl = json.RawMessage(pick(raws))
				}
			}
			check(&m)
		}
	}
}

func mustJSON(s string) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkEncodeMessage: a user message of one ~21 KB tool result of the
// corpus's kind (code, quotes, newlines), marked, by EncodeMessage and by
// json.Marshal.
func BenchmarkEncodeMessage(b *testing.B) {
	var text bytes.Buffer
	for text.Len() < 21<<10 {
		text.WriteString("\tif err := f(\"<x>\", &y); err != nil {\n\t\treturn fmt.Errorf(\"read: %w\", err)\n\t}\n")
	}
	m := Message{Role: "user", Content: []Block{{Type: "tool_result", ToolUseID: "toolu_01", Content: []Block{{Type: "text", Text: text.String()}}, CacheControl: Ephemeral}}}
	b.Run("EncodeMessage", func(b *testing.B) {
		for b.Loop() {
			if _, err := EncodeMessage(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkParseMessage: a client's user message of one ~21 KB tool
// result of the corpus's kind (code, quotes, newlines), its content a
// string and an array of one text block, marked, as the proxy parses a
// new message.
func BenchmarkParseMessage(b *testing.B) {
	var text bytes.Buffer
	for text.Len() < 21<<10 {
		text.WriteString("\tif err := f(\"<x>\", &y); err != nil {\n\t\treturn fmt.Errorf(\"read: %w\", err)\n\t}\n")
	}
	s, _ := json.Marshal(text.String())
	for _, c := range []struct{ name, content string }{
		{"string", string(s)},
		{"blocks", `[{"type":"text","text":` + string(s) + `}]`},
	} {
		raw := json.RawMessage(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":` + c.content + `,"cache_control":{"type":"ephemeral"}}]}`)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := ParseMessage(raw, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
