// Package wirereplay replays recorded real agent sessions (testdata/corpus)
// on the wire, as their agents sent them: each request rebuilt turn by turn
// — the client's whole history, resent with the moving cache marker on its
// newest message, the previous answer as the provider gave it — and sent
// either straight to a fake upstream (no proxy) or through ctxd's real
// proxy in front of another instance of the same fake. The fake models
// Anthropic's prompt cache and reports usage as Anthropic does (input,
// cache read, cache write), so the two runs compare by the cost the
// provider's cache prices give (docs/design.md §4: cache read 0.1×, cache
// write 1.25× an input token). Tests and docs/performance.md use it; it is
// never imported outside tests.
package wirereplay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/transcript"
	"github.com/ctxd/ctxd/wire/anthropic"
)

// Source names one recorded session of the corpus and how its agent sent
// it.
type Source struct {
	// File is the corpus file (corpustest names).
	File string
	// Agent is "claude-code" or "pi".
	Agent string
	// Thinking is the request's thinking setting as the agent sent it
	// ("" for none): Claude Code 2.x on Opus 4.6 sends {"type":"adaptive"}.
	Thinking string
	// Limit, when not 0, is the window of a model the catalog lacks (a
	// scripted model of a recording): Through configures it as
	// [models."<model>"], as an operator would.
	Limit uint64
}

// Sources are the corpus sessions the replay runs: every Claude Code and pi
// session on the Anthropic Messages API.
var Sources = []Source{
	{File: "claude-code/autocompact-150tools.jsonl", Agent: "claude-code", Thinking: `{"type":"adaptive"}`},
	{File: "claude-code/v1-167tools-sidechains.jsonl", Agent: "claude-code"},
	{File: "recorded/claude-code/cc2.1.197-two-turns.jsonl", Agent: "claude-code", Thinking: `{"type":"adaptive"}`},
	{File: "pi/454tools-2compactions.jsonl", Agent: "pi"},
	{File: "recorded/pi/pi0.73.1-anthropic-1compaction.jsonl", Agent: "pi", Thinking: `{"type":"enabled","budget_tokens":8000}`, Limit: 200000},
}

// Session is a recorded session rebuilt as its agent's requests.
type Session struct {
	Source
	// Model is the model the requests name.
	Model string
	// Turns are the requests in order.
	Turns []Turn
}

// Turn is one request of the agent and the answer the provider gave it.
type Turn struct {
	// Messages is the client's history as sent, in the canonical model
	// (the validator's input).
	Messages []history.Message
	// Body is the Anthropic Messages request body.
	Body []byte
	// Answer is the recorded answer, as the upstream returns it.
	Answer history.Message
	// Prompt is a piece of the newest prompt a person wrote in Messages,
	// plain characters only, so that it appears byte for byte in any JSON
	// encoding of the request ("" when the prompt has no such piece).
	Prompt string
	// FirstTask is such a piece of the first prompt a person wrote in the
	// request (the first task, as the client still holds it).
	FirstTask string
	// Items, for a Responses API session (LoadCodex), is the recorded
	// answer as its output items (a JSON array); Answer is unset then.
	Items json.RawMessage
}

// Load rebuilds src's requests. An agent's own compaction (Claude Code's
// compact_boundary, pi's compaction entry) restarts the client's list with
// the agent's summary as a user message, then the messages after it. Calls
// the recording never answered get the abandoned-round result
// (history.CloseAbandoned) and blank text blocks are left out
// (history.Sendable): the request that the provider accepted, not the one
// it refused (the pi recording holds one such 400). maxTurns > 0 keeps
// only the first maxTurns requests (and builds no more).
func Load(tb testing.TB, src Source, maxTurns int) *Session {
	tb.Helper()
	tr, err := transcript.Import(bytes.NewReader(corpustest.Read(tb, src.File)), transcript.Options{})
	if err != nil {
		tb.Fatalf("%s: %v", src.File, err)
	}
	s := &Session{Source: src, Model: tr.Model}
	tools := toolsOf(tr.Messages)
	head := requestHead(s.Model, tools, src.Thinking, sessionUUID(src.File))
	starts := []int{0}
	summaries := []string{""}
	for _, c := range tr.OriginalCompactions {
		starts = append(starts, c.MessageIndex)
		summaries = append(summaries, c.Summary)
	}
	starts = append(starts, len(tr.Messages))
	for seg := 0; seg+1 < len(starts); seg++ {
		list := []history.Message{}
		if seg > 0 {
			list = append(list, history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText,
				Text: "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:\n" + summaries[seg]}}})
		}
		list = append(list, tr.Messages[starts[seg]:starts[seg+1]]...)
		list, _ = history.CloseAbandoned(nil, list)
		for i := range list {
			list[i], _ = history.DropTrailingThinking(list[i])
		}
		list = history.Sendable(list)
		s.Turns = append(s.Turns, turns(list, head, maxTurns-len(s.Turns))...)
		if maxTurns > 0 && len(s.Turns) >= maxTurns {
			break
		}
	}
	if len(s.Turns) == 0 {
		tb.Fatalf("%s: no request", src.File)
	}
	return s
}

// turns builds one request per assistant message of list (the request
// that answered it), rendering and encoding each wire message once; at
// most limit when limit > 0.
func turns(list []history.Message, head []byte, limit int) []Turn {
	var out []Turn
	var wire []anthropic.Message
	var enc [][]byte
	prev := 0
	for k := 1; k < len(list) && (limit <= 0 || len(out) < limit); k++ {
		if list[k].Role != history.RoleAssistant {
			continue
		}
		if list[0].Role != history.RoleUser {
			break
		}
		wire = anthropic.AppendMessages(wire, list[prev:k])
		// Messages before the last are final: the next piece starts with
		// an assistant message, a message of its own.
		for len(enc) < len(wire)-1 {
			e, _ := json.Marshal(&wire[len(enc)])
			enc = append(enc, e)
		}
		last := wire[len(wire)-1]
		last.Content = append([]anthropic.Block(nil), last.Content...)
		last.Content[len(last.Content)-1].CacheControl = json.RawMessage(`{"type":"ephemeral"}`)
		lastEnc, _ := json.Marshal(&last)
		var b bytes.Buffer
		b.Write(head)
		b.WriteString(`"messages":[`)
		for _, e := range enc[:len(wire)-1] {
			b.Write(e)
			b.WriteByte(',')
		}
		b.Write(lastEnc)
		b.WriteString(`]}`)
		out = append(out, Turn{Messages: list[:k:k], Body: b.Bytes(), Answer: list[k], Prompt: promptPiece(list[:k]), FirstTask: firstPiece(list[:k])})
		prev = k
	}
	return out
}

// requestHead is the request's fields before "messages": model, max_tokens,
// a system prompt and tools of an agent's size (the recordings keep
// neither; Claude Code's are about 15,000 tokens together), the thinking
// setting and Claude Code's metadata naming the session.
func requestHead(model string, tools []string, thinking, session string) []byte {
	var sys strings.Builder
	for i := 0; sys.Len() < 24000; i++ {
		fmt.Fprintf(&sys, "Rule %d: work in small verified steps; read a file before editing it; run the tests after a change; report what you did and what is left. ", i)
	}
	var defs []string
	for _, name := range tools {
		desc := strings.Repeat("Runs the "+name+" tool with the given input and returns its output as text. ", 12)
		d, _ := json.Marshal(map[string]any{"name": name, "description": desc, "input_schema": map[string]any{"type": "object", "additionalProperties": true}})
		defs = append(defs, string(d))
	}
	sysJSON, _ := json.Marshal([]map[string]any{{"type": "text", "text": sys.String(), "cache_control": map[string]string{"type": "ephemeral"}}})
	meta, _ := json.Marshal(map[string]string{"user_id": `{"device_id":"replay","session_id":"` + session + `"}`})
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":%q,"max_tokens":32000,"system":%s,"tools":[%s],`, model, sysJSON, strings.Join(defs, ","))
	if thinking != "" {
		fmt.Fprintf(&b, `"thinking":%s,`, thinking)
	}
	fmt.Fprintf(&b, `"metadata":{"user_id":%s},`, mustString(meta))
	return b.Bytes()
}

func mustString(meta []byte) string {
	var m map[string]string
	_ = json.Unmarshal(meta, &m)
	s, _ := json.Marshal(m["user_id"])
	return string(s)
}

// toolsOf lists the tool names the session's calls use, in first-use order.
func toolsOf(msgs []history.Message) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Type == history.BlockToolCall && !seen[b.Name] {
				seen[b.Name] = true
				out = append(out, b.Name)
			}
		}
	}
	return out
}

// sessionUUID is a stable session id of the uuid shape for a file name.
func sessionUUID(name string) string {
	h := fmt.Sprintf("%032x", []byte(name))
	h = h[len(h)-32:]
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// NewestPrompt returns the index of the newest message of msgs that is a
// prompt a person wrote (history.IsPersonPrompt), -1 when none.
func NewestPrompt(msgs []history.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if history.IsPersonPrompt(msgs[i]) {
			return i
		}
	}
	return -1
}

// promptPiece is the longest run (at most 60 bytes, at least 12) of plain
// characters — letters, digits, spaces and .,-_: — in the newest person's
// prompt of msgs: it reads the same in every JSON encoding.
func promptPiece(msgs []history.Message) string {
	return pieceOf(msgs, NewestPrompt(msgs))
}

// firstPiece is promptPiece of the first person's prompt of msgs.
func firstPiece(msgs []history.Message) string {
	for i := range msgs {
		if history.IsPersonPrompt(msgs[i]) {
			return pieceOf(msgs, i)
		}
	}
	return ""
}

// pieceOf is plainPiece of message i's text ("" when i < 0).
func pieceOf(msgs []history.Message, i int) string {
	if i < 0 {
		return ""
	}
	var text strings.Builder
	for _, b := range msgs[i].Content {
		if b.Type == history.BlockText {
			text.WriteString(b.Text)
			text.WriteByte('\n')
		}
	}
	return plainPiece(text.String())
}

// plainPiece is the longest run (at most 60 bytes, at least 12) of plain
// characters — letters, digits, spaces and .,-_: — of text ("" when none
// is that long).
func plainPiece(s string) string {
	plain := func(r rune) bool {
		return r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(" .,-_:", r))
	}
	best := ""
	cur := 0
	for j, r := range s + "\x00" {
		if plain(r) {
			continue
		}
		if run := strings.TrimSpace(s[cur:j]); len(run) > len(best) {
			best = run
		}
		cur = j + len(string(r))
	}
	if len(best) > 60 {
		best = best[:60]
	}
	if len(best) < 12 {
		return ""
	}
	return best
}
