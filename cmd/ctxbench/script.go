package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/transcript"
)

// script is one conversation to replay: the messages before the first
// response, then one step per assistant response.
type script struct {
	name   string
	model  string
	system string
	head   []api.Message // before the first response (the first prompt)
	steps  []step
}

// step is one model call of the replay: the response and what the agent
// appends after it (tool results, the next user prompt) before the next
// call.
type step struct {
	response api.Message
	// outputTokens is the response's recorded output usage, or an estimate
	// (characters / 4) when the transcript has none.
	outputTokens uint64
	after        []api.Message
}

// messages is the number of messages one pass of the script appends.
func (s *script) messages() int {
	n := len(s.head)
	for _, st := range s.steps {
		n += 1 + len(st.after)
	}
	return n
}

// loadTranscript imports a transcript file with package transcript and
// cuts it into steps. Open tool calls are closed as abandoned first, as
// ctxctl import does.
func loadTranscript(path string) (*script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr, err := transcript.Import(f, transcript.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr.CloseAbandoned()
	msgs := make([]api.Message, len(tr.Messages))
	for i := range tr.Messages {
		// history.Message and api.Message share their JSON (api's parity
		// test keeps them in step).
		b, err := json.Marshal(&tr.Messages[i])
		if err != nil {
			return nil, fmt.Errorf("%s: message %d: %w", path, i, err)
		}
		if err := json.Unmarshal(b, &msgs[i]); err != nil {
			return nil, fmt.Errorf("%s: message %d: %w", path, i, err)
		}
		msgs[i].Seq, msgs[i].Tokens = 0, 0
	}
	s := cutSteps(msgs)
	s.name, s.model, s.system = path, tr.Model, tr.System
	if len(s.steps) == 0 {
		return nil, fmt.Errorf("%s: no assistant response to replay", path)
	}
	return s, nil
}

// cutSteps splits msgs at each assistant message.
func cutSteps(msgs []api.Message) *script {
	s := &script{}
	i := 0
	for i < len(msgs) && msgs[i].Role != api.RoleAssistant {
		s.head = append(s.head, msgs[i])
		i++
	}
	for i < len(msgs) {
		st := step{response: msgs[i]}
		if u := msgs[i].Usage; u != nil && u.OutputTokens > 0 {
			st.outputTokens = u.OutputTokens
		} else {
			st.outputTokens = uint64(contentChars(msgs[i])/4 + 1)
		}
		i++
		for i < len(msgs) && msgs[i].Role != api.RoleAssistant {
			st.after = append(st.after, msgs[i])
			i++
		}
		s.steps = append(s.steps, st)
	}
	return s
}

// contentChars is the number of bytes of text and JSON in m's blocks.
func contentChars(m api.Message) int {
	n := 0
	for _, b := range m.Content {
		n += len(b.Text) + len(b.Input) + len(b.JSON)
	}
	return n
}

// generatedScript returns a synthetic coding session of rounds rounds:
// each an assistant message with a tool call, a tool result of 200 to
// 12,000 characters of log-like lines, and one time in four an answer
// followed by the user's next prompt. seed makes it reproducible.
func generatedScript(seed uint64, rounds int) *script {
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	words := strings.Fields("the daemon keeps every session inside the window with offloading context editing and compaction go func err nil return reconcile cursor batch merchant settlement fetched matched latency")
	text := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(words[rnd.IntN(len(words))])
			if rnd.IntN(12) == 0 {
				b.WriteByte('\n')
			} else {
				b.WriteByte(' ')
			}
		}
		return b.String()
	}
	user := func(t string) api.Message {
		return api.Message{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: t}}}
	}
	var msgs []api.Message
	msgs = append(msgs, user("Fix the failing reconciliation job. "+text(200)))
	tools := []string{"bash", "read", "grep", "edit"}
	answered := false
	for r := range rounds {
		if answered {
			msgs = append(msgs, user("Next: "+text(100+rnd.IntN(400))))
		}
		id := fmt.Sprintf("toolu_%04d", r)
		tool := tools[rnd.IntN(len(tools))]
		input, _ := json.Marshal(map[string]string{"command": text(30)})
		msgs = append(msgs, api.Message{Role: api.RoleAssistant, Content: []api.Block{
			{Type: api.BlockText, Text: text(100 + rnd.IntN(600))},
			{Type: api.BlockToolCall, ID: id, Name: tool, Input: input},
		}})
		msgs = append(msgs, api.Message{Role: api.RoleTool, ToolCallID: id, ToolName: tool,
			Content: []api.Block{{Type: api.BlockText, Text: text(200 + rnd.IntN(11800))}}})
		answered = rnd.IntN(4) == 0
		if answered {
			msgs = append(msgs, api.Message{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockText, Text: text(80 + rnd.IntN(300))}}})
		}
	}
	s := cutSteps(msgs)
	s.name = fmt.Sprintf("generated(seed=%d)", seed)
	s.system = "You are a coding agent. Use the tools to inspect and fix the repository."
	return s
}
