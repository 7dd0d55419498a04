package transcript

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
)

// piLine is one entry of a pi session JSONL.
type piLine struct {
	Type      string          `json:"type"`
	Timestamp json.RawMessage `json:"timestamp"`
	ModelID   string          `json:"modelId"`
	// message entries
	Message *piMessage `json:"message"`
	// compaction entries
	Summary      string `json:"summary"`
	TokensBefore uint64 `json:"tokensBefore"`
}

type piMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Timestamp json.RawMessage `json:"timestamp"`
	Model     string          `json:"model"`
	Usage     *struct {
		Input      uint64 `json:"input"`
		Output     uint64 `json:"output"`
		CacheRead  uint64 `json:"cacheRead"`
		CacheWrite uint64 `json:"cacheWrite"`
	} `json:"usage"`
	// toolResult
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	IsError    bool   `json:"isError"`
	// bashExecution
	Command            string `json:"command"`
	Output             string `json:"output"`
	ExitCode           *int   `json:"exitCode"`
	Cancelled          bool   `json:"cancelled"`
	Truncated          bool   `json:"truncated"`
	FullOutputPath     string `json:"fullOutputPath"`
	ExcludeFromContext bool   `json:"excludeFromContext"`
}

type piBlock struct {
	Type              string          `json:"type"`
	Text              string          `json:"text"`
	Thinking          string          `json:"thinking"`
	ThinkingSignature string          `json:"thinkingSignature"`
	ID                string          `json:"id"`
	Name              string          `json:"name"`
	Arguments         json.RawMessage `json:"arguments"`
	Data              string          `json:"data"`
	MimeType          string          `json:"mimeType"`
	raw               json.RawMessage
}

// piContent decodes pi content: a string or an array of blocks.
func piContent(raw json.RawMessage) ([]piBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []piBlock{{Type: "text", Text: s}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, fmt.Errorf("content is neither a string nor an array of blocks: %w", err)
	}
	out := make([]piBlock, 0, len(raws))
	for i, r := range raws {
		var b piBlock
		if err := json.Unmarshal(r, &b); err != nil {
			return nil, fmt.Errorf("content block %d: %w", i, err)
		}
		b.raw = r
		out = append(out, b)
	}
	return out, nil
}

func (b piBlock) canonical() history.Block {
	switch b.Type {
	case "text":
		return textBlock(b.Text)
	case "thinking":
		return history.Block{Type: history.BlockThinking, Text: b.Thinking, Signature: b.ThinkingSignature}
	case "toolCall":
		return history.Block{Type: history.BlockToolCall, ID: b.ID, Name: b.Name, Input: rawjson.Value(b.Arguments)}
	case "image":
		return history.Block{Type: history.BlockImage, MediaType: b.MimeType, Data: b.Data}
	}
	return jsonBlock(b.raw)
}

func importPi(data []byte, opts Options) (*Transcript, error) {
	b := newBuilder(FormatPi)
	for _, ln := range splitLines(data) {
		var l piLine
		if err := json.Unmarshal(ln.text, &l); err != nil {
			if err := malformed(b.t, opts, ln, err); err != nil {
				return nil, err
			}
			continue
		}
		switch l.Type {
		case "session", "model_change":
			if l.ModelID != "" && b.t.Model == "" {
				b.t.Model = l.ModelID
			}
		case "compaction":
			b.compaction(l.TokensBefore, l.Summary, "")
		case "message":
			if err := piAppend(b, l); err != nil {
				if err := malformed(b.t, opts, ln, err); err != nil {
					return nil, err
				}
			}
		}
	}
	return b.t, nil
}

// piAppend converts one message entry; it changes nothing on error.
func piAppend(b *builder, l piLine) error {
	m := l.Message
	if m == nil {
		return errors.New("message entry without message")
	}
	at := parseTime(m.Timestamp)
	if at.IsZero() {
		at = parseTime(l.Timestamp)
	}
	blocks, err := piContent(m.Content)
	if err != nil {
		return err
	}
	content := make([]history.Block, 0, len(blocks))
	for _, blk := range blocks {
		content = append(content, blk.canonical())
	}
	switch m.Role {
	case "user":
		b.user(content, at)
	case "assistant":
		msg := history.Message{Content: content, Time: at, Model: m.Model}
		if u := m.Usage; u != nil {
			msg.Usage = usage(history.Usage{
				InputTokens:              u.Input,
				CacheCreationInputTokens: u.CacheWrite,
				CacheReadInputTokens:     u.CacheRead,
				OutputTokens:             u.Output,
			})
		}
		b.assistant(msg)
	case "toolResult":
		b.tool(m.ToolCallID, m.ToolName, content, m.IsError, at)
	case "bashExecution":
		if m.ExcludeFromContext {
			return nil
		}
		b.user(textBlocks(bashText(m)), at)
	default:
		// Other roles (extension or hook messages of newer pi versions)
		// reach the model as user content; keep what they carry.
		b.user(content, at)
	}
	return nil
}

// bashText renders a shell command the user ran in pi (not a tool call) as
// the user message the model saw: the command, its output, and how it ended.
func bashText(m *piMessage) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Ran `%s`\n", m.Command)
	if m.Output != "" {
		sb.WriteString("```\n")
		sb.WriteString(strings.TrimRight(m.Output, "\n"))
		sb.WriteString("\n```\n")
	} else {
		sb.WriteString("(no output)\n")
	}
	switch {
	case m.Cancelled:
		sb.WriteString("(command cancelled)\n")
	case m.ExitCode != nil && *m.ExitCode != 0:
		fmt.Fprintf(&sb, "Command exited with code %d\n", *m.ExitCode)
	}
	if m.Truncated {
		if m.FullOutputPath != "" {
			fmt.Fprintf(&sb, "[Output truncated. Full output: %s]\n", m.FullOutputPath)
		} else {
			sb.WriteString("[Output truncated]\n")
		}
	}
	return strings.TrimRight(sb.String(), "\n")
}
