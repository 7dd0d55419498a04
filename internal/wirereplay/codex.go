package wirereplay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// CodexSources are the Codex CLI sessions of the corpus (Responses API):
// rebuilt from the rollout's own items, which are the input items Codex
// sends. Their model is not in the catalog: Limit is its window, as an
// operator configures it.
var CodexSources = []Source{
	{File: "recorded/codex/cli0.171-function-tools.rollout.jsonl", Agent: "codex", Limit: 258400},
	{File: "recorded/codex/cli0.171-code-mode-2compactions.rollout.jsonl", Agent: "codex", Limit: 475000},
}

// LoadSource is LoadCodex for a Codex source, Load for the others.
func LoadSource(tb testing.TB, src Source, maxTurns int) *Session {
	if src.Agent == "codex" {
		return LoadCodex(tb, src, maxTurns)
	}
	return Load(tb, src, maxTurns)
}

// internalFields are members of a rollout item that Codex keeps for itself
// and never sends.
var internalFields = []string{"internal_chat_message_metadata_passthrough"}

// LoadCodex rebuilds a Codex rollout's requests: the input of each is every
// item before the model's answer (response_item lines, in order; Codex's
// own compaction, a compacted line, restarts the list with its
// replacement_history), the answer the output items the model gave
// (reasoning, messages, function and custom tool calls). The request
// carries the session's base instructions, a tool for each tool the
// session calls, reasoning with encrypted content, store false and the
// session's prompt_cache_key, as Codex sends them; it is not streamed (the
// fake answers JSON). maxTurns > 0 keeps only the first maxTurns requests.
func LoadCodex(tb testing.TB, src Source, maxTurns int) *Session {
	tb.Helper()
	var (
		instructions, model, id string
		list                    []json.RawMessage
		out                     []json.RawMessage // the answer being read
		lists                   [][]json.RawMessage
		answers                 [][]json.RawMessage
		calls                   = map[string]string{}
		order                   []string
	)
	flush := func() {
		if len(out) > 0 {
			lists = append(lists, append([]json.RawMessage(nil), list...))
			answers = append(answers, out)
			list = append(list, out...)
			out = nil
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(corpustest.Read(tb, src.File)))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var line struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Type {
		case "session_meta":
			var m struct {
				ID   string `json:"id"`
				Base struct {
					Text string `json:"text"`
				} `json:"base_instructions"`
			}
			_ = json.Unmarshal(line.Payload, &m)
			instructions, id = m.Base.Text, m.ID
		case "turn_context":
			var c struct {
				Model string `json:"model"`
			}
			if json.Unmarshal(line.Payload, &c) == nil && c.Model != "" {
				model = c.Model
			}
		case "compacted":
			flush()
			var c struct {
				History []json.RawMessage `json:"replacement_history"`
			}
			_ = json.Unmarshal(line.Payload, &c)
			list = nil
			for _, it := range c.History {
				list = append(list, cleanItem(it))
			}
		case "response_item":
			it := cleanItem(line.Payload)
			var h struct {
				Type string `json:"type"`
				Role string `json:"role"`
				Name string `json:"name"`
			}
			_ = json.Unmarshal(it, &h)
			switch {
			case h.Type == "ghost_snapshot":
			case h.Type == "reasoning" || h.Type == "function_call" || h.Type == "custom_tool_call" || (h.Type == "message" && h.Role == "assistant"):
				out = append(out, it)
				if h.Name != "" && calls[h.Name] == "" {
					calls[h.Name] = h.Type
					order = append(order, h.Name)
				}
			default:
				flush()
				list = append(list, it)
			}
		}
	}
	flush()
	if len(lists) == 0 {
		tb.Fatalf("%s: no request", src.File)
	}
	s := &Session{Source: src, Model: model}
	var tools []string
	for _, name := range order {
		desc := strings.Repeat("Runs the "+name+" tool with the given input and returns its output as text. ", 12)
		var d []byte
		if calls[name] == "custom_tool_call" {
			d, _ = json.Marshal(map[string]any{"type": "custom", "name": name, "description": desc})
		} else {
			d, _ = json.Marshal(map[string]any{"type": "function", "name": name, "description": desc, "strict": false,
				"parameters": map[string]any{"type": "object", "additionalProperties": true}})
		}
		tools = append(tools, string(d))
	}
	for i, items := range lists {
		if maxTurns > 0 && i >= maxTurns {
			break
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, `{"model":%q,"instructions":%s,"input":[`, model, mustJSON(instructions))
		for k, it := range items {
			if k > 0 {
				b.WriteByte(',')
			}
			b.Write(it)
		}
		fmt.Fprintf(&b, `],"tools":[%s],"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":%q}`,
			strings.Join(tools, ","), id)
		ans, _ := json.Marshal(answers[i])
		prompts := personPrompts(items)
		t := Turn{Body: b.Bytes(), Items: ans}
		if len(prompts) > 0 {
			t.Prompt, t.FirstTask = plainPiece(prompts[len(prompts)-1]), plainPiece(prompts[0])
		}
		s.Turns = append(s.Turns, t)
	}
	return s
}

// cleanItem is a rollout item as Codex sends it: its internal members cut.
func cleanItem(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	cut := false
	for _, k := range internalFields {
		if _, ok := m[k]; ok {
			delete(m, k)
			cut = true
		}
	}
	if !cut {
		return raw
	}
	out, _ := json.Marshal(m)
	return out
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// personPrompts are the texts of the user message items of items that a
// person wrote (history.IsPersonPrompt: not Codex's environment context,
// user instructions, AGENTS.md or a compaction's summary), oldest first.
func personPrompts(items []json.RawMessage) []string {
	var out []string
	for _, it := range items {
		var m struct {
			Type    string `json:"type"`
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(it, &m) != nil || m.Type != "message" || m.Role != "user" {
			continue
		}
		msg := history.Message{Role: history.RoleUser}
		var text strings.Builder
		for _, c := range m.Content {
			if c.Type == "input_text" {
				msg.Content = append(msg.Content, history.Block{Type: history.BlockText, Text: c.Text})
				text.WriteString(c.Text)
				text.WriteByte('\n')
			}
		}
		if history.IsPersonPrompt(msg) {
			out = append(out, text.String())
		}
	}
	return out
}
