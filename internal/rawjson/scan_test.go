package rawjson

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestMemberRangeAndSplice(t *testing.T) {
	body := []byte(`{"a":1, "b" : {"x":[1,"]"]} ,"c":"\"}"}`)
	s, e, ok := MemberRange(body, "b")
	if !ok || string(body[s:e]) != `{"x":[1,"]"]}` {
		t.Fatalf("MemberRange b = %q, %v", body[s:e], ok)
	}
	if _, _, ok := MemberRange(body, "z"); ok {
		t.Fatal("MemberRange found a member the body does not have")
	}
	got := Splice(body, s, e, []byte(`2`))
	if want := `{"a":1, "b" : 2 ,"c":"\"}"}`; string(got) != want {
		t.Fatalf("Splice = %s, want %s", got, want)
	}
	if got := WithMember([]byte(` {}`), `"k":1`); string(got) != ` {"k":1}` {
		t.Fatalf("WithMember on an empty object = %s", got)
	}
	if got := BareText([]byte(`[{"type":"text","text":"hi"}]`), []byte(`"text"`)); string(got) != `"hi"` {
		t.Fatalf("BareText = %s", got)
	}
	if got := BareText([]byte(`[{"type":"text","text":"hi","cache":1}]`), []byte(`"text"`)); got != nil {
		t.Fatalf("BareText of a block with another member = %s", got)
	}
}

// FuzzScanArray holds the scanner to encoding/json: the elements of a
// valid JSON array are the ones encoding/json finds, byte for byte, and
// the members of a valid object are its keys; on any input, no offset
// goes out of range.
func FuzzScanArray(f *testing.F) {
	for _, s := range []string{`[]`, `[1, "a\"]", {"b":[2]}, null ]`, `{"a":{"b":"}"},"c":[]}`, `["\\"]`, `[1,`, `{"a"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if e := ValueEnd(b, SkipSpace(b, 0)); e < 0 || e > len(b) {
			t.Fatalf("ValueEnd = %d out of [0, %d]", e, len(b))
		}
		i := SkipSpace(b, 0)
		elems, end, err := ScanArray(b, i)
		var want []json.RawMessage
		if json.Unmarshal(b, &want) == nil {
			if err != nil {
				t.Fatalf("ScanArray refused a valid array: %v", err)
			}
			if len(elems) != len(want) {
				t.Fatalf("%d elements, encoding/json finds %d", len(elems), len(want))
			}
			if n := CountElems(b[i:end]); n != len(want) {
				t.Fatalf("CountElems = %d, encoding/json finds %d", n, len(want))
			}
			for k := range want {
				if !bytes.Equal(elems[k], want[k]) {
					t.Fatalf("element %d = %s, want %s", k, elems[k], want[k])
				}
			}
			if SkipSpace(b, end) != len(b) {
				t.Fatalf("array ends at %d, data follows", end)
			}
		}
		var obj map[string]json.RawMessage
		// encoding/json replaces invalid UTF-8 in keys; the scanner keeps bytes.
		if utf8.Valid(b) && json.Unmarshal(b, &obj) == nil && obj != nil {
			n := 0
			ok := Members(b, func(key string, vs, ve int) bool {
				if _, in := obj[key]; !in {
					t.Fatalf("member %q not in the object", key)
				}
				if vs < 0 || ve > len(b) || vs >= ve {
					t.Fatalf("member %q range [%d,%d) out of range", key, vs, ve)
				}
				n++
				return true
			})
			if !ok || n < len(obj) {
				t.Fatalf("Members followed %d of %d members (ok %v)", n, len(obj), ok)
			}
		}
	})
}

// Compact is encoding/json's Compact of a valid value, and the value
// itself, not a copy, when it has no white space between tokens.
func TestCompact(t *testing.T) {
	for _, v := range []string{
		`{"a": [1, 2, {"b" : "x y\n"}],` + "\n\t" + `"c":null}`,
		`{"a":"in \" a string: \\\" , "}`,
		`[ ]`,
		`"plain"`,
		`{"k":"v"}`,
	} {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(v)); err != nil {
			t.Fatal(err)
		}
		in := []byte(v)
		got := Compact(in)
		if string(got) != want.String() {
			t.Errorf("Compact(%s) = %s, want %s", v, got, want.String())
		}
		if want.String() == v && &got[0] != &in[0] {
			t.Errorf("Compact(%s) copied a value with no white space", v)
		}
	}
}

func FuzzCompact(f *testing.F) {
	f.Add(`{"a": [1, 2, {"b" : "x y"}]}`)
	f.Add(`"a \" b"`)
	f.Fuzz(func(t *testing.T, v string) {
		var want bytes.Buffer
		if json.Compact(&want, []byte(v)) != nil {
			return
		}
		if got := Compact([]byte(v)); string(got) != want.String() {
			t.Fatalf("Compact(%q) = %q, want %q", v, got, want.String())
		}
	})
}

// FuzzScanArrayBlocks holds ScanArrayBlocks to ScanArray and Blocks: on
// any input the same elements, end and error, and the sum of Blocks over
// the elements, which its one pass finds without walking them again.
func FuzzScanArrayBlocks(f *testing.F) {
	for _, s := range []string{`[]`, `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"}]}]`,
		`[{"content":"text"},{"role":"assistant"},{},1,"x",[2]]`, `[{"content":[]},{"content":[1,"]",{"a":"}"}]}]`,
		`[{"content":[1],"content":[1,2]}]`, `[{"con\u0074ent":[1,2]}]`, `[{"a":x{,"content":[1]}]`, `[{"content":[x[,1]}]`,
		`[{"content":[1,2}]`, `[{"a":"\"","content":[ 1 , 2 ] } , {"content" : [ ] } ]`, `[{"content":[1,2]`, `[{"a"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		i := SkipSpace(b, 0)
		elems, end, err := ScanArray(b, i)
		got, gotEnd, blocks, gotErr := ScanArrayBlocks(b, i)
		if (err == nil) != (gotErr == nil) || (err != nil && err.Error() != gotErr.Error()) {
			t.Fatalf("ScanArrayBlocks error %v, ScanArray's %v", gotErr, err)
		}
		if err != nil {
			return
		}
		if gotEnd != end || len(got) != len(elems) {
			t.Fatalf("ScanArrayBlocks: %d elements to %d, ScanArray %d to %d", len(got), gotEnd, len(elems), end)
		}
		var want uint64
		for k := range elems {
			if !bytes.Equal(got[k], elems[k]) {
				t.Fatalf("element %d: %q, ScanArray's %q", k, got[k], elems[k])
			}
			want += Blocks(elems[k])
		}
		if blocks != want {
			t.Fatalf("%d blocks, Blocks of the elements %d", blocks, want)
		}
	})
}

func TestBlocks(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{`{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"}]}`, 2},
		{`{"role":"user","content":"a string"}`, 1},
		{`{"type":"function_call"}`, 1},
		{`{"content":[]}`, 0},
		{`{"content":[1],"content":[1,2]}`, 1},
		{`{"con\u0074ent":[1,2,3]}`, 3},
		{`"not an object"`, 1},
	} {
		if got := Blocks([]byte(c.in)); got != c.want {
			t.Errorf("Blocks(%s) = %d, want %d", c.in, got, c.want)
		}
		_, _, n, err := ScanArrayBlocks([]byte("["+c.in+"]"), 0)
		if err != nil || n != c.want {
			t.Errorf("ScanArrayBlocks([%s]) = %d, %v; want %d", c.in, n, err, c.want)
		}
	}
}
