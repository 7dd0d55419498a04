package rawjson

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// unquoteSeeds are strings whose decoding has a rule of its own: escapes,
// surrogate pairs and lone halves, invalid UTF-8, and what JSON refuses.
var unquoteSeeds = []string{
	`""`, `"plain"`, `"a\nb\t\"c\"\\d\/e\b\f\r"`, `"\u00e9\u2028"`, `"\ud83d\ude00"`,
	`"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`, `"\uD83D\uDE00"`, `"\ud83d\ud83d\ude00"`,
	"\"\xff\xfe ok\"", "\"caf\xc3\"", "\"\xed\xa0\x80\"", "\"\xf0\x9f\x98\x80 \\n\"", `"\x"`, `"\'"`, `"\u12"`,
	"\"tab\there\"", `"unterminated`, `"a"b"`, `x`, `"`, `"\"`, `"\\"`, `"\u0000"`,
}

// TestUnquoteAsUnmarshal: Unquote gives json.Unmarshal's string for every
// JSON string, and refuses (ok false) every value json.Unmarshal refuses,
// on the seeds and on generated strings of escapes, multi-byte and invalid
// bytes.
func TestUnquoteAsUnmarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"a", " ", "é", "😀", `\n`, `\"`, `\\`, `\/`, `\u00e9`, `\ud83d`, `\ude00`, `\ud83d\ude00`, `\u0041`,
		"\xff", "\xc3", "\xed\xa0\x80", "\x01", `"`, `\`, `\q`, `\u00`, "\t"}
	cases := append([]string(nil), unquoteSeeds...)
	for range 20000 {
		var b strings.Builder
		b.WriteByte('"')
		for range r.IntN(12) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		b.WriteByte('"')
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		checkUnquote(t, c)
	}
}

// checkUnquote compares Unquote and json.Unmarshal on c, a value without
// white space around it (Unquote is given a value's exact bytes).
func checkUnquote(t *testing.T, c string) {
	t.Helper()
	if c == "" || IsSpace(c[0]) || IsSpace(c[len(c)-1]) {
		return
	}
	var want string
	werr := json.Unmarshal([]byte(c), &want)
	got, ok := Unquote([]byte(c))
	if werr != nil {
		if ok {
			t.Fatalf("%q: Unquote took %q, json.Unmarshal refuses: %v", c, got, werr)
		}
		return
	}
	if !ok || got != want {
		t.Fatalf("%q: Unquote %q (ok %v), json.Unmarshal %q", c, got, ok, want)
	}
}

func FuzzUnquote(f *testing.F) {
	for _, s := range unquoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(s, `"`) {
			checkUnquote(t, s)
		}
		checkUnquote(t, `"`+s+`"`)
	})
}
