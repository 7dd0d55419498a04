package responses

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
	"github.com/ctxd/ctxd/wire/openai"
)

// Dialect is the Responses API (POST /v1/responses) as wire.Dialect.
type Dialect struct{ openai.Common }

var _ wire.Dialect = Dialect{}

func (Dialect) Name() string                      { return "responses" }
func (Dialect) Path() string                      { return "/v1/responses" }
func (Dialect) ItemsKey() string                  { return "input" }
func (Dialect) IsPrefix(raw json.RawMessage) bool { return IsPrefixItem(raw) }
func (Dialect) Parse(items []json.RawMessage, from int) ([]history.Message, error) {
	return ParseItems(items, from)
}

// AnswerLen: a Responses answer is the run of assistant-side items from n
// (reasoning, message, calls).
func (d Dialect) AnswerLen(items []json.RawMessage, n int, same func(history.Message) bool) int {
	k := 0
	for ; n+k < len(items); k++ {
		ms, err := ParseItems(items[n+k:n+k+1], 0)
		if err != nil || len(ms) != 1 || ms[0].Role != history.RoleAssistant {
			break
		}
	}
	if k == 0 {
		return 0
	}
	return openai.AnswerLen(d.Parse, items, n, k, same)
}

func (Dialect) NewAnswerReader(maxLine int) wire.AnswerReader {
	return answerReader{NewResponsesStreamReader(maxLine)}
}
func (Dialect) DecodeAnswer(body []byte) (history.Message, string, error) {
	return answerOf(DecodeResponses(body))
}

// Compaction is the type of the Responses API's compaction entry in
// context_management: {"type":"compaction","compact_threshold":N}.
const Compaction = "compaction"

func (Dialect) ServerCompaction() bool { return true }

// WithServerCompaction adds the compaction entry to the body's
// context_management array (creating it when absent); a client compaction
// entry is kept instead.
func (Dialect) WithServerCompaction(body []byte, trigger uint64) ([]byte, string, error) {
	entry := fmt.Sprintf(`{"type":%q,"compact_threshold":%d}`, Compaction, trigger)
	start, end, ok := rawjson.MemberRange(body, "context_management")
	if !ok {
		return rawjson.WithMember(body, `"context_management":[`+entry+`]`), "", nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(body[start:end], &entries); err != nil {
		return nil, "", fmt.Errorf("context_management: not an array")
	}
	for _, e := range entries {
		if wire.TypeOf(e) == Compaction {
			return body, "", nil
		}
	}
	v, _ := json.Marshal(append(entries, json.RawMessage(entry)))
	return rawjson.Splice(body, start, end, v), "", nil
}

// IsServerCompactionRefusal: a 400 or 422 whose message names the
// context_management parameter or its compact_threshold.
func (d Dialect) IsServerCompactionRefusal(status int, body []byte) (string, bool) {
	msg, ok := d.ErrorMessage(body)
	if !ok {
		msg = string(body)
	}
	return wire.RefusalNaming(status, msg, "context_management", "compact_20260112", "compact-2026-01-12", "compact_threshold")
}

type answerReader struct{ *StreamReader }

func (r answerReader) Answer() (history.Message, string, error) {
	return answerOf(r.StreamReader.Answer())
}

func answerOf(a *Answer, err error) (history.Message, string, error) {
	if a != nil && a.Error != nil {
		return history.Message{}, a.Error.Type + ": " + a.Error.Message, nil
	}
	if err != nil || a == nil {
		return history.Message{}, "", err
	}
	m, err := a.Message()
	return m, "", err
}

// RenderItemAlone is ctxd's rendering of the client's Responses item
// items[k] read on its own: nil unless it renders to exactly one item.
// The output of a free-form tool's call renders as a
// custom_tool_call_output only after its call; one is rendered after a
// call of a free-form tool so that it has the rendering it has in the
// conversation. custom names the request's free-form tools
// (CustomToolNames).
func RenderItemAlone(items []json.RawMessage, k int, custom map[string]bool) json.RawMessage {
	ms, err := ParseItems(items, k)
	if err != nil || len(ms) != 1 {
		return nil
	}
	var it struct {
		Type string `json:"type"`
	}
	if ms[0].Role == history.RoleTool && json.Unmarshal(items[k], &it) == nil && it.Type == "custom_tool_call_output" {
		const name = "\x00ctxd-custom"
		call := history.Message{Role: history.RoleAssistant, Content: []history.Block{{
			Type: history.BlockToolCall, ID: ms[0].ToolCallID, Name: name, Input: json.RawMessage(`{"input":""}`)}}}
		r := RenderItems([]history.Message{call, ms[0]}, map[string]bool{name: true})
		if len(r) != 2 {
			return nil
		}
		return r[1]
	}
	r := RenderItems(ms, custom)
	if len(r) != 1 {
		return nil
	}
	return r[0]
}
