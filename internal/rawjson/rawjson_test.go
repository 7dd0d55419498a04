package rawjson

import (
	"encoding/json"
	"testing"
)

// TestValue: valid JSON is kept (a copy), empty becomes {}, anything else
// its JSON string; the result is always valid.
func TestValue(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`:  `{"a":1}`,
		` [1, 2] `: ` [1, 2] `,
		"":         `{}`,
		" \n\t":    `{}`,
		`{"a":`:    `"{\"a\":"`,
		"ls -la":   `"ls -la"`,
	} {
		got := Value([]byte(in))
		if string(got) != want || !json.Valid(got) {
			t.Errorf("Value(%q) = %s, want %s", in, got, want)
		}
	}
	in := []byte(`{"a":1}`)
	got := Value(in)
	in[2] = 'b'
	if string(got) != `{"a":1}` {
		t.Errorf("Value shares its input's bytes: %s", got)
	}
}

// TestArguments: an arguments string that is JSON is that value, an empty
// one {}, another its JSON string.
func TestArguments(t *testing.T) {
	for in, want := range map[string]string{
		`{"path":"a"}`: `{"path":"a"}`,
		"":             `{}`,
		"  ":           `{}`,
		`{"path":`:     `"{\"path\":"`,
	} {
		if got := Arguments(in); string(got) != want || !json.Valid(got) {
			t.Errorf("Arguments(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzValue: whatever the bytes, the result is valid JSON, and valid JSON
// comes back unchanged.
func FuzzValue(f *testing.F) {
	for _, s := range []string{`{"a":1}`, "", "x", `"\u00`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := Value(b)
		if !json.Valid(got) {
			t.Fatalf("Value(%q) = %q, not JSON", b, got)
		}
		if json.Valid(b) && string(got) != string(b) {
			t.Fatalf("Value(%q) = %q, changed valid JSON", b, got)
		}
	})
}
