package proxy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// touches are the changes real clients make to an answer they resend
// (docs/proxy.md, "Clients that touch what they resend"): each takes the
// answer as the provider gave it (thinking, text, one Bash call) and
// returns the message the client sends back.
var touches = []struct {
	name  string
	touch func(text, callID, input string) string
}{
	{"as received", func(text, id, input string) string {
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"sig-plan"},{"type":"text","text":%q},{"type":"tool_use","id":%q,"name":"Bash","input":%s}]}`, text, id, input)
	}},
	{"whitespace re-flowed", func(text, id, input string) string {
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"sig-plan"},{"type":"text","text":%q},{"type":"tool_use","id":%q,"name":"Bash","input":%s}]}`, "  "+text+"\n\n", id, input)
	}},
	{"thinking stripped", func(text, id, input string) string {
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":%q},{"type":"tool_use","id":%q,"name":"Bash","input":%s}]}`, text, id, input)
	}},
	{"fields reordered and a null field dropped", func(text, id, input string) string {
		return fmt.Sprintf(`{"content":[{"signature":"sig-plan","thinking":"plan","type":"thinking"},{"text":%q,"type":"text"},{"input":%s,"name":"Bash","id":%q,"type":"tool_use"}],"role":"assistant"}`, text, input, id)
	}},
	{"tool input re-encoded", func(text, id, input string) string {
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"sig-plan"},{"type":"text","text":%q},{"type":"tool_use","id":%q,"name":"Bash","input":{ "command" : "ls \u002dla" }}]}`, text, id)
	}},
}

// A client that touches the answers it resends in one of the ways real
// clients do (touches) — each answer resent as received once, then touched
// in every later request — stays on one branch of one session for a whole
// tool loop with thinking enabled: no request starts a branch, every
// request is managed, and ctxd sends the answer as the provider gave it
// (thinking included), so each outgoing request extends the previous one
// message for message (docs/design.md §10; before, each touched resend
// started a branch: 48 branches and 50 compactions in 80 requests).
func TestClientThatTouchesWhatItResendsStaysOnOneBranch(t *testing.T) {
	for _, tc := range touches {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, testConfig())
			c := newConversation().user("list the files, many times")
			c.thinking = `{"type":"enabled","budget_tokens":2000}`
			session := ""
			const rounds = 6
			type turn struct{ text, id, input string }
			var turns []turn
			for i := 0; i < rounds; i++ {
				// The newest answer goes back as received, the older ones
				// touched: the client changes what it already resent once.
				c.msgs = c.msgs[:1]
				for k, tn := range turns {
					raw := touches[0].touch(tn.text, tn.id, tn.input)
					if k < len(turns)-1 {
						raw = tc.touch(tn.text, tn.id, tn.input)
					}
					c.assistant(raw).results([2]string{tn.id, fmt.Sprintf("file-%d", k)})
				}
				id, text, input := fmt.Sprintf("toolu_%02d", i), fmt.Sprintf("Step %d:  listing the files again.", i), `{"command":"ls -la"}`
				f.up.script(reply{stream: true, body: sse("plan", text, [][3]string{{id, "Bash", input}}, 100, 5)})
				resp, _ := f.post(c.body(), nil)
				got := resp.Header.Get(HeaderSessionID)
				if got == "" || (session != "" && got != session) {
					t.Fatalf("request %d: session %q (first %q): %s", i, got, session, resp.Header.Get(HeaderDiagnostic))
				}
				session = got
				turns = append(turns, turn{text, id, input})
			}
			if st := f.p.Stats(); st.Branches != 0 || st.PassedThrough != 0 || st.ClientRuleBreaks != 0 || st.Conversations != 1 || st.MaxBranches != 1 {
				t.Fatalf("stats %+v: want one conversation of one session, no pass-through or rule break", st)
			}
			reqs := f.up.requests()
			for i := 1; i < len(reqs); i++ {
				prev, next := unmarked(t, reqs[i-1].body), unmarked(t, reqs[i].body)
				if len(next) < len(prev) || !reflect.DeepEqual(next[:len(prev)], prev) {
					for k := range prev {
						if k < len(next) && !reflect.DeepEqual(next[k], prev[k]) {
							t.Fatalf("request %d does not extend request %d: message %d was %v, now %v", i, i-1, k, prev[k], next[k])
						}
					}
					t.Fatalf("request %d does not extend request %d", i, i-1)
				}
				if a := next[1]; len(a["content"].([]any)) == 0 || a["content"].([]any)[0].(map[string]any)["type"] != "thinking" {
					t.Fatalf("request %d: the answer went out without its thinking: %v", i, a)
				}
			}
		})
	}
}

// unmarked is the outgoing messages with every cache marker removed.
func unmarked(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	msgs := outgoingMessages(t, body)
	for _, m := range msgs {
		if blocks, ok := m["content"].([]any); ok {
			for _, b := range blocks {
				delete(b.(map[string]any), "cache_control")
			}
		}
	}
	out, _ := json.Marshal(msgs)
	var back []map[string]any
	_ = json.Unmarshal(out, &back)
	return back
}
