package anthropic

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestParseErrorNamesTheMessage: a parse error names the message's index,
// then, with a ".", the field it is about, or, with ": ", what is wrong
// with the message as a whole.
func TestParseErrorNamesTheMessage(t *testing.T) {
	deep := `{"role":"user","content":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`
	for _, c := range []struct{ raw, want string }{
		{deep, "messages[1]: "},
		{`"x"`, "messages[1]: "},
		{`{"role":"user","content":7}`, "messages[1].content: "},
		{`{"role":"robot","content":"x"}`, "messages[1].role: "},
	} {
		raw := []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`), json.RawMessage(c.raw)}
		_, _, err := ParseEach(raw, 0)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%.40s: error %v, want it to start with %q", c.raw, err, c.want)
		}
	}
}
