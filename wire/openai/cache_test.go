package openai

import "testing"

// TestCachePlainTextOneForm: plain text is one element whichever form the
// client wrote it in — a Responses input given as a string, a user
// message with a string content, one input_text message item, a Chat
// string content and one text block — the forms the provider reads alike
// and ctxd sends in one another's place.
func TestCachePlainTextOneForm(t *testing.T) {
	const want = `{"role":"user","content":"Hello there"}`
	for _, c := range []struct {
		body      string
		responses bool
	}{
		{`{"model":"m","input":"Hello there"}`, true},
		{`{"model":"m","input": "Hello there" }`, true},
		{`{"model":"m","input":[{"role":"user","content":"Hello there"}]}`, true},
		{`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Hello there"}]}]}`, true},
		{`{"model":"m","messages":[{"role":"user","content":"Hello there"}]}`, false},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Hello there"}]}]}`, false},
	} {
		elems, last, _, err := Cache([]byte(c.body), c.responses)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(elems[len(elems)-1]); got != want || last != len(elems)-1 {
			t.Errorf("%s: last element %s (marker %d), want %s", c.body, got, last, want)
		}
	}
}
