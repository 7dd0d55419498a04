package rawjson

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValid holds Valid to encoding/json's Valid on any input.
func FuzzValid(f *testing.F) {
	for _, s := range []string{``, ` `, `1`, `-0.5e+3`, `01`, `-`, `1.`, `1e`, `.5`, `"a\u00e9\"\\\/\b\f\n\r\t"`, `"\x"`, `"\u12g4"`,
		"\"\x01\"", "\"\xff\xfe\"", `{"a":[1,{"b":null}],"c":true,"d":false}`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{,}`,
		` [ ] `, `{}x`, `nul`, `truex`, `[tru]`, `{"a":1}}`, `]`, `"unterminated`, "[\"\t\"]", `{"k":{"k":{"k":[]}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json's %v", b, got, want)
		}
	})
}

// Nesting is bounded as encoding/json bounds it.
func TestValidDepth(t *testing.T) {
	for _, n := range []int{9999, 10000, 10001} {
		for _, open := range []string{"[", `{"k":`} {
			closer := "]"
			if open != "[" {
				closer = "}"
			}
			b := []byte(strings.Repeat(open, n) + "1" + strings.Repeat(closer, n))
			if got, want := Valid(b), json.Valid(b); got != want {
				t.Fatalf("depth %d of %s: Valid %v, encoding/json %v", n, open, got, want)
			}
		}
	}
}

// BenchmarkValid checks a message of the size of a new tool result
// (~21 KB of code output as a JSON string), against encoding/json's
// Valid.
func BenchmarkValid(b *testing.B) {
	var text strings.Builder
	for text.Len() < 21<<10 {
		text.WriteString("func (p *Proxy) prepare(ctx context.Context, l *lane) error {\n\tif err := p.fresh(ctx, l); err != nil {\n\t\treturn fmt.Errorf(\"fresh: %w\", err)\n\t}\n}\n")
	}
	s, _ := json.Marshal(text.String())
	msg := []byte(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":` + string(s) + `}]}`)
	b.Run("rawjson", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			Valid(msg)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			json.Valid(msg)
		}
	})
}
