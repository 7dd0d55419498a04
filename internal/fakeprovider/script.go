package fakeprovider

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Step kinds of the scripted coding task, in the order the fake plays them
// within one turn (one user prompt): Config.Rounds shell commands, one file
// write, the final answer. A request without a shell tool is a side request
// (title generation, a quota probe) and gets a plain answer.
const (
	StepShell = "shell" // a shell command printing Config.OutputBytes bytes
	StepWrite = "write" // write Config.WriteFile
	StepFinal = "final" // the final answer text, with Config.Marker
	// StepRecall calls Config.RecallTool before the final answer.
	StepRecall = "recall"
	StepSide   = "side" // a request declaring no shell tool: a plain text answer
	// StepSummary answers a request to summarize the conversation (an
	// agent's own compaction, ctxd's summarizer) with a summary that carries
	// the task's progress forward, as a real model's summary would.
	StepSummary = "summary"
)

// summaryRequest matches the instructions agents and ctxd end a
// summarization request with: Claude Code ("Respond with TEXT ONLY", "create
// a detailed summary of the conversation"), pi ("The messages above are a
// conversation to summarize", "context checkpoint summary"), ctxd ("write a
// checkpoint summary of the conversation above"). A compacted conversation's
// own summary message ("This is a summary of the N earlier messages", "The
// summary below covers") does not match.
var summaryRequest = regexp.MustCompile(`(?i)TEXT ONLY|summary of the conversation|conversation to summari[sz]e|checkpoint summary`)

// fileWritten is the text the fake's summaries carry once the task's file
// was written.
const fileWritten = "ctxd-fake-file-written"

// tools is what the fake found among a request's tool definitions.
type tools struct {
	shell, shellArg string // tool name and its command property
	shellArgv       bool   // the command property is an argv array
	shellCode       bool   // the shell is Codex's code-mode "exec" (JavaScript)
	write           string // "" when none
	writePath       string // the write tool's path property (file_path, path)
	writeContent    string // its content property
}

type schema struct {
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
}

// findTools picks the agent's shell and write tools by name and input schema:
// Claude Code's Bash{command} and Write{file_path, content}, pi's
// bash{command} and write{path, content}, Codex's exec_command{cmd} or
// shell{command: [argv]}, and any tool shaped alike.
func findTools(ts []Tool) tools {
	var t tools
	for _, tool := range ts {
		if tool.Type == "custom" && tool.Name == "exec" && t.shell == "" {
			// Codex's code mode: a free-form tool running JavaScript whose
			// tools.exec_command runs a shell command.
			t.shell, t.shellCode = tool.Name, true
			continue
		}
		var s schema
		_ = json.Unmarshal(tool.InputSchema, &s)
		name := strings.ToLower(tool.Name)
		arg := ""
		for _, p := range []string{"command", "cmd"} {
			if _, ok := s.Properties[p]; ok {
				arg = p
				break
			}
		}
		_, hasContent := s.Properties["content"]
		pathProp := ""
		for _, p := range []string{"file_path", "path", "filename"} {
			if _, ok := s.Properties[p]; ok {
				pathProp = p
				break
			}
		}
		switch {
		case t.shell == "" && arg != "" && (name == "bash" || strings.Contains(name, "shell") || strings.Contains(name, "exec") || name == "run_command"):
			t.shell, t.shellArg = tool.Name, arg
			var prop struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(s.Properties[arg], &prop)
			t.shellArgv = prop.Type == "array"
		case t.write == "" && hasContent && pathProp != "" && (name == "write" || strings.Contains(name, "write")):
			t.write, t.writePath, t.writeContent = tool.Name, pathProp, "content"
		}
	}
	return t
}

// shellInput is the shell tool's input for a command line: a string, or
// bash -lc and the line for a tool taking an argv array.
func (t tools) shellInput(line string) map[string]any {
	if t.shellCode {
		q, _ := json.Marshal(line)
		return map[string]any{"input": fmt.Sprintf("const r = await tools.exec_command({cmd: %s});\ntext(r);\n", q)}
	}
	if t.shellArgv {
		return map[string]any{t.shellArg: []string{"bash", "-lc", line}}
	}
	return map[string]any{t.shellArg: line}
}

// cwdPattern finds the working directory the agents state in their system
// prompt ("Primary working directory: /x", "Current working directory: /x").
var cwdPattern = regexp.MustCompile(`(?i)working directory:\s*(/[^\s` + "`" + `'"]+)`)

// plan is the fake's decision for one request: the step and, for tool steps,
// the tool call it makes.
type plan struct {
	step  string
	round int // 1-based shell round, for StepShell
	tool  string
	input map[string]any
	code  bool   // the tool is free-form: input["input"] is its raw input
	text  string // the answer text, for StepFinal and StepSide
}

// roundDone is the text a shell round's command prints last. The command
// itself contains "$((n))" where the output has the digits, so the literal
// command (in a tool_use input, or in a summary quoting it) is not taken for
// its output.
func roundDone(n int) string { return fmt.Sprintf("ctxd-fake-round-%d-done", n) }

// decide picks the next step from the conversation the request carries: the
// messages since the last user prompt (a user message without tool results —
// a compaction summary counts as one) are searched for the evidence of each
// step, so retries, resends and rewritten histories get the same answer and
// a request counter plays no part.
func (p *Provider) decide(r *MessagesRequest) plan {
	t := findTools(r.Tools)
	if isSummaryRequest(r) {
		return plan{step: StepSummary, text: p.summary(r)}
	}
	if t.shell == "" {
		return plan{step: StepSide, text: p.cfg.SideAnswer}
	}
	start := 0
	for i, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		if !hasToolResult(m) {
			start = i
		}
	}
	// A prompt directly preceded by other user messages without results (a
	// compaction's summary, a carried first request: ctxd keeps the current
	// request verbatim after the summary, docs/design.md §5.2) is read with
	// them, as a model reads the summary before the request it carries.
	for start > 0 && r.Messages[start-1].Role == "user" && !hasToolResult(r.Messages[start-1]) {
		start--
	}
	var evidence strings.Builder
	wrote := false
	recalled, recallText := false, ""
	for _, m := range r.Messages[start:] {
		if m.Role != "user" {
			continue
		}
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case "text":
				evidence.WriteString(b.Text)
				if strings.Contains(b.Text, fileWritten) {
					wrote = true
				}
			case "tool_result":
				text := b.ResultText()
				if p.issuedStep(b.ToolUseID) == StepRecall {
					recalled, recallText = true, text
					continue
				}
				evidence.WriteString(text)
				if p.issuedStep(b.ToolUseID) == StepWrite ||
					strings.Contains(text, filepath.Base(p.cfg.WriteFile)) {
					wrote = true
				}
			}
			evidence.WriteByte('\n')
		}
	}
	// Rounds run in order, so the highest one evidenced is where the task
	// is: a summary or a context edit may have dropped the earlier ones.
	if n := doneRounds(evidence.String(), p.cfg.Rounds) + 1; n <= p.cfg.Rounds {
		return plan{step: StepShell, round: n, tool: t.shell, code: t.shellCode, input: t.shellInput(p.shellCommand(n))}
	}
	if !wrote {
		content := p.cfg.WriteContent
		if t.write != "" {
			path := p.cfg.WriteFile
			if !filepath.IsAbs(path) {
				if m := cwdPattern.FindStringSubmatch(r.SystemText()); m != nil {
					path = filepath.Join(m[1], path)
				} else if strings.HasPrefix(strings.ToLower(t.writePath), "file_path") {
					path = "" // the tool wants an absolute path the fake does not know
				}
			}
			if path != "" {
				return plan{step: StepWrite, tool: t.write, input: map[string]any{t.writePath: path, t.writeContent: content}}
			}
		}
		return plan{step: StepWrite, tool: t.shell, code: t.shellCode, input: t.shellInput(
			fmt.Sprintf("printf '%%s' %s > %s && echo wrote %s", shellQuote(content), shellQuote(p.cfg.WriteFile), shellQuote(filepath.Base(p.cfg.WriteFile))))}
	}
	final := fmt.Sprintf("The task is done: %d shell rounds run and %s written. %s", p.cfg.Rounds, p.cfg.WriteFile, p.cfg.Marker)
	if p.cfg.RecallTool != "" && declares(r.Tools, p.cfg.RecallTool) {
		if !recalled {
			return plan{step: StepRecall, tool: p.cfg.RecallTool, input: p.cfg.RecallInput}
		}
		final += " recalled: " + recallLine(recallText, p.cfg.RecallExpect)
	}
	return plan{step: StepFinal, text: final}
}

// declares reports whether ts has a tool named name.
func declares(ts []Tool, name string) bool {
	for _, t := range ts {
		if t.Name == name {
			return true
		}
	}
	return false
}

// recallLine is the first line of text holding expect (the first line
// when expect is "" or absent), cut to 300 bytes.
func recallLine(text, expect string) string {
	lines := strings.Split(text, "\n")
	out := lines[0]
	for _, l := range lines {
		if expect != "" && strings.Contains(l, expect) {
			out = l
			break
		}
	}
	if len(out) > 300 {
		out = out[:300]
	}
	return out
}

// doneRounds is the highest shell round (≤ rounds) whose output text is in
// ev, or 0.
func doneRounds(ev string, rounds int) int {
	for n := rounds; n >= 1; n-- {
		if strings.Contains(ev, roundDone(n)) {
			return n
		}
	}
	return 0
}

// isSummaryRequest reports whether the request's last message is a user
// message whose last text block (the instruction agents and ctxd put last)
// asks for a summary.
func isSummaryRequest(r *MessagesRequest) bool {
	if len(r.Messages) == 0 {
		return false // a Chat request of system messages only
	}
	last := r.Messages[len(r.Messages)-1]
	if last.Role != "user" {
		return false
	}
	for i := len(last.Content.Blocks) - 1; i >= 0; i-- {
		if b := last.Content.Blocks[i]; b.Type == "text" {
			return summaryRequest.MatchString(b.Text)
		}
	}
	return false
}

// summary is the fake's summary of a conversation: the progress markers of
// every round and of the file write found anywhere in it (tool results, text,
// a serialized transcript), so the task continues after a compaction.
func (p *Provider) summary(r *MessagesRequest) string {
	var ev strings.Builder
	for _, m := range r.Messages {
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case "text":
				ev.WriteString(b.Text)
			case "tool_result":
				t := b.ResultText()
				ev.WriteString(t)
				if p.issuedStep(b.ToolUseID) == StepWrite || strings.Contains(t, filepath.Base(p.cfg.WriteFile)) {
					ev.WriteString(fileWritten)
				}
			}
		}
	}
	e := ev.String()
	var sb strings.Builder
	sb.WriteString("<analysis>\nThe user asked for the scripted task.\n</analysis>\n<summary>\nProgress of the scripted task:")
	for n := 1; n <= doneRounds(e, p.cfg.Rounds); n++ {
		sb.WriteString(" " + roundDone(n))
	}
	if strings.Contains(e, fileWritten) || strings.Contains(e, "wrote "+filepath.Base(p.cfg.WriteFile)) {
		sb.WriteString(" " + fileWritten)
	}
	sb.WriteString(".\n</summary>")
	return sb.String()
}

// shellCommand prints about Config.OutputBytes bytes of numbered lines (66
// bytes each), then roundDone(n).
func (p *Provider) shellCommand(n int) string {
	lines := max(p.cfg.OutputBytes/66, 1)
	return fmt.Sprintf("seq -f 'ctxd-fake-line-%%06g the quick brown fox jumps over the lazy dog' 1 %d; echo ctxd-fake-round-$((%d))-done", lines, n)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// toolID is a deterministic tool_use id for a step of a conversation: the
// same request gets the same id, as a resend must.
func toolID(prefix []byte, step string, round int) string {
	h := sha256.New()
	h.Write(prefix)
	fmt.Fprintf(h, "|%s|%d", step, round)
	const alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
	sum := h.Sum(nil)
	var sb strings.Builder
	sb.WriteString("toolu_01")
	for i := 0; i < 22; i++ {
		sb.WriteByte(alphabet[int(sum[i])%len(alphabet)])
	}
	return sb.String()
}

// hasToolResult reports whether m carries a tool_result block.
func hasToolResult(m Message) bool {
	for _, b := range m.Content.Blocks {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}
