// Package transcript imports sessions that agents wrote — Claude Code, pi and
// Codex CLI session JSONL, SWE-agent trajectories, and plain JSON arrays of
// Anthropic or OpenAI chat messages — into ctxd's canonical message model
// (docs/design.md §1 "transcript/", §2). It reads bytes and returns messages; it
// knows nothing of storage.
package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ctxd/ctxd/history"
)

// The formats Import recognises, as reported in Transcript.Format.
const (
	FormatClaudeCode        = "claude-code"
	FormatPi                = "pi"
	FormatCodex             = "codex"
	FormatSWEAgent          = "swe-agent"
	FormatAnthropicMessages = "anthropic-messages"
	FormatOpenAIChat        = "openai-chat"
)

// Errors returned by the importers. Test them with errors.Is.
var (
	// ErrEmpty: the input holds nothing but whitespace.
	ErrEmpty = errors.New("transcript: empty input")
	// ErrTooLarge: the input is longer than Options.MaxBytes (default
	// DefaultMaxBytes); nothing was imported.
	ErrTooLarge = errors.New("transcript: input too large")
	// ErrUnknownFormat: Import could not tell which format the input is in.
	ErrUnknownFormat = errors.New("transcript: unknown format")
	// ErrMalformed: a line or a JSON value could not be decoded; the error
	// is a *MalformedError naming the line or the offset.
	ErrMalformed = errors.New("transcript: malformed input")
	// ErrNoMessages: the input decoded but held no conversation message
	// (for example a JSONL file of progress lines only).
	ErrNoMessages = errors.New("transcript: no messages")
)

// MalformedError describes input an importer could not decode. Line is the
// 1-based line of a JSONL file (0 for a single JSON document); Offset is the
// byte offset into the input where the bad value starts or the JSON decoder
// stopped (0 when not known). errors.Is(err, ErrMalformed) holds for it.
type MalformedError struct {
	Line   int
	Offset int64
	// Err is the underlying decoding error or a description of the problem.
	Err error
}

// Error implements error, naming the line or the offset.
func (e *MalformedError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("transcript: line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("transcript: offset %d: %v", e.Offset, e.Err)
}

// Unwrap returns the underlying error.
func (e *MalformedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrMalformed.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// Options controls an import. The zero value imports the main conversation
// and fails on the first malformed line.
type Options struct {
	// IncludeSidechains keeps Claude Code sub-agent (Task) messages, marked
	// isSidechain in the file. They are placed after the main-conversation
	// tool round they ran inside, so no call is left open across them
	// (docs/decisions.md).
	IncludeSidechains bool
	// SkipMalformed skips a line (or array element) that does not decode and
	// counts it in Transcript.Skipped instead of failing. A JSON document
	// that is not even syntactically valid still fails.
	SkipMalformed bool
	// MaxBytes bounds the input, in bytes: a longer input (a device such as
	// /dev/zero, a wrong file) fails with ErrTooLarge after reading
	// MaxBytes+1 bytes, instead of exhausting memory. 0 means
	// DefaultMaxBytes.
	MaxBytes int64
}

// DefaultMaxBytes is the default bound of an imported transcript: 512 MiB,
// far above real sessions (the corpus's largest is 3 MB).
const DefaultMaxBytes int64 = 512 << 20

// readAll reads r whole, at most opts.MaxBytes bytes (ErrTooLarge past it).
func readAll(r io.Reader, opts Options) ([]byte, error) {
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("transcript: read: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	return data, nil
}

// OriginalCompaction is a compaction the original agent performed, as its
// transcript records it (docs/design.md §2; `ctxctl replay` compares ctxd's
// compactions with these).
type OriginalCompaction struct {
	// BeforeResponse is the number of assistant responses (after merging)
	// that precede the compaction.
	BeforeResponse int
	// MessageIndex is the index into Transcript.Messages of the first message
	// after the compaction (len(Messages) when nothing follows).
	MessageIndex int
	// PreTokens is the context size in tokens when the agent compacted, as
	// the agent recorded it (Claude Code preTokens, pi tokensBefore, Codex:
	// the last reported total before the compacted line); 0 when unknown.
	PreTokens uint64
	// Summary is the agent's summary text ("" when the file has none).
	Summary string
	// Trigger is "auto" or "manual" where the agent records it, else "".
	Trigger string
}

// Transcript is one imported session in the canonical model.
type Transcript struct {
	// Format is one of the Format* constants.
	Format string
	// System is the system prompt (SWE-agent and chat arrays, Codex developer
	// messages); docs/design.md §2 has no system role. "" when none.
	System string
	// Messages is the conversation in order. Assistant messages carry the
	// Usage of their response when the agent recorded one; tool results are
	// role "tool" messages, one per call, with ToolCallID, ToolName and
	// IsError. Calls that never got a result stay unanswered (see
	// CloseAbandoned).
	Messages []history.Message
	// Responses is the number of assistant API responses after merging, that
	// is the number of assistant messages.
	Responses int
	// ToolCalls is the number of tool_call blocks.
	ToolCalls int
	// OriginalCompactions lists the agent's own compactions in order.
	OriginalCompactions []OriginalCompaction
	// Model is the most recent model the transcript names ("" when none).
	Model string
	// ContextLimit is the model's context window in tokens where the
	// transcript records it (Codex model_context_window), else 0.
	ContextLimit uint64
	// Skipped counts lines or elements skipped as malformed under
	// Options.SkipMalformed.
	Skipped int
	// RenamedCallIDs counts tool calls whose id repeated an earlier call's id
	// and was made unique (the original id plus "_dupN"), together with the
	// result answering it (docs/decisions.md).
	RenamedCallIDs int
	// CutLine is the number of the last line of a JSONL file when it was
	// cut short (no newline, not valid JSON: the agent was still writing)
	// and skipped; 0 otherwise.
	CutLine int
	// TrailingCalls are the tool calls the file ended with, with no result
	// after them; they are not in Messages (see dropTrailingCalls).
	TrailingCalls []TrailingCall
}

// Import reads a whole transcript from r, detects its format from the
// content (see Detect) and imports it. Errors: ErrTooLarge, ErrEmpty, ErrUnknownFormat,
// ErrNoMessages, a *MalformedError (errors.Is ErrMalformed), or the read
// error of r.
func Import(r io.Reader, opts Options) (*Transcript, error) {
	data, err := readAll(r, opts)
	if err != nil {
		return nil, err
	}
	format, err := Detect(data)
	if err != nil {
		return nil, err
	}
	return importBytes(format, data, opts)
}

// ImportFormat reads r and imports it as the given format (one of the
// Format* constants), without detection. Errors as Import, plus
// ErrUnknownFormat for a format name it does not know.
func ImportFormat(r io.Reader, format string, opts Options) (*Transcript, error) {
	data, err := readAll(r, opts)
	if err != nil {
		return nil, err
	}
	return importBytes(format, data, opts)
}

// ImportClaudeCode imports a Claude Code session JSONL (1.0.x and 2.x).
// Errors as Import.
func ImportClaudeCode(r io.Reader, opts Options) (*Transcript, error) {
	return ImportFormat(r, FormatClaudeCode, opts)
}

// ImportPi imports a pi coding-agent session JSONL. Errors as Import.
func ImportPi(r io.Reader, opts Options) (*Transcript, error) {
	return ImportFormat(r, FormatPi, opts)
}

// ImportCodex imports a Codex CLI rollout JSONL. Errors as Import.
func ImportCodex(r io.Reader, opts Options) (*Transcript, error) {
	return ImportFormat(r, FormatCodex, opts)
}

// ImportSWEAgent imports a SWE-agent .traj JSON document. Errors as Import.
func ImportSWEAgent(r io.Reader, opts Options) (*Transcript, error) {
	return ImportFormat(r, FormatSWEAgent, opts)
}

// ImportAnthropicMessages imports a JSON array of Anthropic Messages
// ({role, content}), or a request body object holding "system" and
// "messages". Errors as Import.
func ImportAnthropicMessages(r io.Reader, opts Options) (*Transcript, error) {
	return ImportFormat(r, FormatAnthropicMessages, opts)
}

// ImportOpenAIChat imports a JSON array of OpenAI chat messages ({role,
// content, tool_calls, tool_call_id}), or a request body object holding
// "messages". Errors as Import.
func ImportOpenAIChat(r io.Reader, opts Options) (*Transcript, error) {
	return ImportFormat(r, FormatOpenAIChat, opts)
}

func importBytes(format string, data []byte, opts Options) (*Transcript, error) {
	if len(bytes.TrimSpace(trimBOM(data))) == 0 {
		return nil, ErrEmpty
	}
	data = trimBOM(data)
	var (
		t   *Transcript
		err error
	)
	switch format {
	case FormatClaudeCode:
		t, err = importClaudeCode(data, opts)
	case FormatPi:
		t, err = importPi(data, opts)
	case FormatCodex:
		t, err = importCodex(data, opts)
	case FormatSWEAgent:
		t, err = importSWEAgent(data, opts)
	case FormatAnthropicMessages, FormatOpenAIChat:
		t, err = importChat(format, data, opts)
	case FormatMiniSWEAgent:
		t, err = importMiniSWEAgent(data, opts)
	case FormatOpenAIResponses:
		t, err = importResponses(data, opts)
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownFormat, format)
	}
	if err != nil {
		return nil, err
	}
	dropTrailingCalls(t)
	if len(t.Messages) == 0 {
		return nil, fmt.Errorf("%w in %s input", ErrNoMessages, format)
	}
	normalizeToolInputs(t.Messages)
	unsignedThinkingToText(t.Messages)
	return t, nil
}

// unsignedThinkingToText turns a thinking block without a signature into a
// text block holding the thinking between <thinking> tags: a provider that
// binds thinking to signatures refuses an unsigned thinking block, so the
// agent cannot have sent it as one (pi, for one, sends such blocks as text),
// and ctxd refuses to store one for such a model (docs/design.md §4).
func unsignedThinkingToText(msgs []history.Message) {
	for i := range msgs {
		for j := range msgs[i].Content {
			b := &msgs[i].Content[j]
			if b.Type == history.BlockThinking && b.Signature == "" {
				*b = history.Block{Type: history.BlockText, Text: "<thinking>\n" + b.Text + "\n</thinking>"}
			}
		}
	}
}

// normalizeToolInputs gives every tool call an object input, as providers
// require: a recorded string or other value becomes {"input": value}
// (history.ObjectInput).
func normalizeToolInputs(msgs []history.Message) {
	for i := range msgs {
		for j := range msgs[i].Content {
			b := &msgs[i].Content[j]
			if b.Type == history.BlockToolCall && !history.IsObject(b.Input) {
				b.Input = history.ObjectInput(b.Input)
			}
		}
	}
}

func trimBOM(data []byte) []byte {
	return bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
}

// Detect returns the format of data, judged from its content: a single JSON
// document (an array of chat messages, a SWE-agent trajectory object, or a
// request body object with "messages"), or JSONL whose first decodable lines
// carry one agent's markers (Codex: {timestamp, type, payload}; pi: entry
// types session/message/compaction with pi roles; Claude Code: sessionId,
// uuid, or its line types). Errors: ErrEmpty, ErrUnknownFormat.
func Detect(data []byte) (string, error) {
	data = bytes.TrimSpace(trimBOM(data))
	if len(data) == 0 {
		return "", ErrEmpty
	}
	if data[0] == '[' {
		if isOpenHandsEvents(data) {
			return "", errOpenHands
		}
		return detectChatArray(data), nil
	}
	if data[0] != '{' {
		return "", fmt.Errorf("%w: input is neither JSON nor JSONL", ErrUnknownFormat)
	}
	// One JSON document spanning the whole input?
	dec := json.NewDecoder(bytes.NewReader(data))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err == nil && dec.InputOffset() == int64(len(data)) {
		if isMiniSWEAgent(obj) {
			return FormatMiniSWEAgent, nil
		}
		if h, ok := obj["history"]; ok {
			if isOpenHandsEvents(h) {
				return "", errOpenHands
			}
			return FormatSWEAgent, nil
		}
		if _, ok := obj["input"]; ok {
			if _, msgs := obj["messages"]; !msgs {
				return FormatOpenAIResponses, nil
			}
		}
		if msgs, ok := obj["messages"]; ok {
			if _, sys := obj["system"]; sys {
				return FormatAnthropicMessages, nil
			}
			return detectChatArray(msgs), nil
		}
	}
	// JSONL: vote on the first lines that decode.
	seen := 0
	for _, ln := range splitLines(data) {
		var probe struct {
			Type      string          `json:"type"`
			Payload   json.RawMessage `json:"payload"`
			SessionID string          `json:"sessionId"`
			UUID      string          `json:"uuid"`
			LeafUUID  string          `json:"leafUuid"`
			History   json.RawMessage `json:"history"`
			Message   *struct {
				Role string `json:"role"`
			} `json:"message"`
		}
		if json.Unmarshal(ln.text, &probe) != nil {
			continue
		}
		switch {
		case probe.History != nil && isOpenHandsEvents(probe.History):
			return "", errOpenHands
		case probe.Payload != nil && codexLineTypes[probe.Type]:
			return FormatCodex, nil
		case probe.SessionID != "" || probe.UUID != "" || probe.LeafUUID != "" || claudeOnlyTypes[probe.Type]:
			return FormatClaudeCode, nil
		case piOnlyTypes[probe.Type]:
			return FormatPi, nil
		case probe.Type == "message" && probe.Message != nil:
			return FormatPi, nil
		}
		seen++
		if seen >= 100 {
			break
		}
	}
	return "", fmt.Errorf("%w: no known JSONL markers in the first lines", ErrUnknownFormat)
}

var codexLineTypes = map[string]bool{
	"session_meta": true, "turn_context": true, "response_item": true,
	"event_msg": true, "compacted": true,
}

var claudeOnlyTypes = map[string]bool{
	"file-history-snapshot": true, "queue-operation": true, "progress": true, "summary": true,
}

var piOnlyTypes = map[string]bool{
	"session": true, "compaction": true, "model_change": true,
	"thinking_level_change": true, "branch_summary": true, "custom": true,
	"label": true, "session_info": true,
}

// line is one non-blank line of a JSONL input.
type line struct {
	num  int // 1-based
	off  int64
	text []byte
	// cut: the last line of the input, with no newline after it — what a
	// live session file holds while the agent is writing it.
	cut bool
}

// splitLines returns the non-blank lines of data with their numbers and
// offsets; a trailing "\r" is dropped.
func splitLines(data []byte) []line {
	var out []line
	num := 0
	var off int64
	for len(data) > 0 {
		num++
		i := bytes.IndexByte(data, '\n')
		var l []byte
		if i < 0 {
			l, data = data, nil
		} else {
			l, data = data[:i], data[i+1:]
		}
		text := bytes.TrimSpace(l)
		if len(text) > 0 {
			out = append(out, splitGlued(line{num: num, off: off + int64(bytes.Index(l, text)), text: text, cut: i < 0})...)
		}
		off += int64(len(l)) + 1
	}
	return out
}

// malformed records a bad line: with SkipMalformed it counts it and returns
// nil, else it returns the error naming the line.
//
// A cut last line (no newline after it, not valid JSON) is skipped and
// counted in any case:
// a session file that the agent is still writing ends with a partial line,
// and the complete lines before it are a valid transcript.
func malformed(t *Transcript, opts Options, ln line, err error) error {
	if ln.cut && !json.Valid(ln.text) {
		t.Skipped++
		t.CutLine = ln.num
		return nil
	}
	if opts.SkipMalformed {
		t.Skipped++
		return nil
	}
	return &MalformedError{Line: ln.num, Offset: ln.off, Err: err}
}
