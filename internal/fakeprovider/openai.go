package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The OpenAI side of the fake: POST /v1/responses (the Responses API, Codex
// CLI's only one) and POST /v1/chat/completions (Chat Completions, pi's
// openai-completions provider and most frameworks). A request is converted to
// the canonical Messages shape the task script reads (tool calls as tool_use,
// outputs as tool_result), checked with OpenAI's own rules and texts, and
// answered in the API's format: streamed Responses events
// (response.created … response.completed) or Chat chunks ending in
// "data: [DONE]", or the whole JSON.

// The texts of OpenAI's 400 answers (the context-length ones are in the
// corpus, providers/error-bodies.json).
const (
	msgChatTooLong      = "This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages."
	msgResponsesTooLong = "Your input exceeds the context window of this model. Please adjust your input and try again."
	msgChatOrphanTool   = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
	// msgChatInvalidRole and msgChatNoMessages: the API's refusals of a
	// role it does not know and of an empty messages array.
	msgChatInvalidRole    = "Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
	msgChatNoMessages     = "[] is too short - 'messages'"
	msgChatNoToolReply    = "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s"
	msgRespNoOutput       = "No tool output found for function call %s."
	msgRespNoCall         = "No tool call found for function call output with call_id %s."
	msgOpenAINoKey        = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
	msgOpenAIBadKey       = "Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys."
	msgOpenAIUnknownParam = "Unknown parameter: 'context_management'."
	msgOpenAIBadJSON      = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)"
)

// OpenAIError is an error answer in OpenAI's shape: HTTP Status and the body
// {"error":{"message","type","param","code"}} (param and code null when
// empty).
type OpenAIError struct {
	Status        int
	Message, Type string
	Param, Code   string
}

// Error returns "<status> <code or type>: <message>".
func (e *OpenAIError) Error() string {
	c := e.Code
	if c == "" {
		c = e.Type
	}
	return fmt.Sprintf("%d %s: %s", e.Status, c, e.Message)
}

// Body renders the error as OpenAI's JSON body.
func (e *OpenAIError) Body() []byte {
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	type inner struct { // OpenAI's field order
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    any    `json:"code"`
	}
	_ = enc.Encode(struct {
		Error inner `json:"error"`
	}{inner{e.Message, e.Type, null(e.Param), null(e.Code)}})
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func openAIInvalid(param, format string, args ...any) *OpenAIError {
	return &OpenAIError{Status: 400, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

func writeOpenAIError(w http.ResponseWriter, e *OpenAIError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-request-id", newRequestID())
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.Body())
}

// textOf returns the text of an OpenAI content value: a string, or the text
// of its parts (text, input_text, output_text) joined by newlines.
func textOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		out = append(out, p.Text)
	}
	return strings.Join(out, "\n")
}

// canon builds the canonical request: it appends blocks to the last message
// when it has the same role, so consecutive tool outputs (or a reasoning item
// and its calls) form one message.
type canon struct{ r MessagesRequest }

func (c *canon) add(role string, b Block) {
	n := len(c.r.Messages)
	if n > 0 && c.r.Messages[n-1].Role == role {
		c.r.Messages[n-1].Content.Blocks = append(c.r.Messages[n-1].Content.Blocks, b)
		return
	}
	c.r.Messages = append(c.r.Messages, Message{Role: role, Content: Content{Blocks: []Block{b}}})
}

func (c *canon) system(s string) {
	if s == "" {
		return
	}
	var cur string
	if len(c.r.System) > 0 {
		_ = json.Unmarshal(c.r.System, &cur)
		cur += "\n"
	}
	c.r.System, _ = json.Marshal(cur + s)
}

// chatRequest is the part of a Chat Completions request the fake reads.
type chatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// canonChat converts and checks a Chat Completions request: every tool
// message answers a tool call of the assistant message before the run of
// tool messages it is in, and every tool call is answered.
func canonChat(cr *chatRequest) (*MessagesRequest, *OpenAIError) {
	if len(cr.Messages) == 0 {
		return nil, openAIInvalid("messages", msgChatNoMessages)
	}
	var c canon
	c.r.Model, c.r.Stream, c.r.MaxTokens = cr.Model, cr.Stream, 1
	for _, t := range cr.Tools {
		c.r.Tools = append(c.r.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters})
	}
	pending := map[string]bool{}
	pendingAt := -1
	var order []string
	flush := func() *OpenAIError {
		var missing []string
		for _, id := range order {
			if pending[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return openAIInvalid(fmt.Sprintf("messages.[%d].role", pendingAt), msgChatNoToolReply, strings.Join(missing, ", "))
		}
		pending, order, pendingAt = map[string]bool{}, nil, -1
		return nil
	}
	answerable := map[string]bool{}
	for i, m := range cr.Messages {
		if m.Role != "tool" {
			if err := flush(); err != nil {
				return nil, err
			}
			answerable = map[string]bool{}
		}
		switch m.Role {
		case "system", "developer":
			c.system(textOf(m.Content))
		case "user":
			c.add("user", Block{Type: "text", Text: textOf(m.Content)})
		case "assistant":
			if t := textOf(m.Content); t != "" {
				c.add("assistant", Block{Type: "text", Text: t})
			}
			for _, tc := range m.ToolCalls {
				c.add("assistant", Block{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage(orJSON(tc.Function.Arguments))})
				pending[tc.ID], answerable[tc.ID] = true, true
				order = append(order, tc.ID)
				pendingAt = i
			}
		case "function":
			// The deprecated function-result role: accepted, and not read.
		default:
			if m.Role != "tool" {
				return nil, openAIInvalid(fmt.Sprintf("messages.[%d].role", i), msgChatInvalidRole, m.Role)
			}
			if !answerable[m.ToolCallID] {
				return nil, openAIInvalid(fmt.Sprintf("messages.[%d].role", i), msgChatOrphanTool)
			}
			delete(pending, m.ToolCallID)
			content, _ := json.Marshal(textOf(m.Content))
			c.add("user", Block{Type: "tool_result", ToolUseID: m.ToolCallID, Content: content})
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return &c.r, nil
}

func orJSON(s string) string {
	if json.Valid([]byte(s)) {
		return s
	}
	b, _ := json.Marshal(map[string]string{"raw": s})
	return string(b)
}

// responsesRequest is the part of a Responses request the fake reads.
type responsesRequest struct {
	Model        string          `json:"model"`
	Instructions string          `json:"instructions"`
	Input        json.RawMessage `json:"input"`
	Stream       bool            `json:"stream"`
	Reasoning    json.RawMessage `json:"reasoning"`
	Tools        []responseTool  `json:"tools"`
	// ContextManagement asks for server-side compaction
	// ([{"type":"compaction","compact_threshold":N}], compaction.go).
	ContextManagement []struct {
		Type             string `json:"type"`
		CompactThreshold int    `json:"compact_threshold"`
	} `json:"context_management"`
}

// responseTool is a Responses tool definition: a function (JSON Schema
// parameters), a custom (free-form) tool, or a namespace of either (Codex's
// code mode).
type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Tools       []responseTool  `json:"tools"`
}

// responseItem is one input or output item of the Responses API.
type responseItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments string          `json:"arguments,omitempty"`
	Input     string          `json:"input,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	// Tools is set on Codex's "additional_tools" item (code mode).
	Tools []responseTool `json:"tools,omitempty"`
}

// canonResponses converts and checks a Responses request: every
// function_call (or custom_tool_call) has its output in the input, every
// output answers a call before it.
func canonResponses(rr *responsesRequest) (*MessagesRequest, *OpenAIError) {
	var c canon
	c.r.Model, c.r.Stream, c.r.MaxTokens = rr.Model, rr.Stream, 1
	c.system(rr.Instructions)
	addTools := func(ts []responseTool) {
		for _, t := range ts {
			switch t.Type {
			case "function":
				c.r.Tools = append(c.r.Tools, Tool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters})
			case "custom":
				c.r.Tools = append(c.r.Tools, Tool{Name: t.Name, Type: "custom", Description: t.Description})
			}
		}
	}
	addTools(rr.Tools)
	var items []responseItem
	in := bytes.TrimSpace(rr.Input)
	if len(in) > 0 && in[0] == '"' {
		var s string
		_ = json.Unmarshal(in, &s)
		items = []responseItem{{Type: "message", Role: "user", Content: in}}
	} else if err := json.Unmarshal(in, &items); err != nil {
		return nil, openAIInvalid("input", "Invalid type for 'input': expected a string or an array of input items.")
	}
	calls, outputs := map[string]bool{}, map[string]bool{}
	for _, it := range items {
		if it.Type == "function_call_output" || it.Type == "custom_tool_call_output" {
			outputs[it.CallID] = true
		}
	}
	for _, it := range items {
		switch it.Type {
		case "additional_tools":
			for _, ns := range it.Tools {
				addTools(append([]responseTool{ns}, ns.Tools...))
			}
		case "message", "":
			switch it.Role {
			case "system", "developer":
				c.system(textOf(it.Content))
			case "assistant":
				c.add("assistant", Block{Type: "text", Text: textOf(it.Content)})
			default:
				c.add("user", Block{Type: "text", Text: textOf(it.Content)})
			}
		case "function_call", "custom_tool_call":
			if !outputs[it.CallID] {
				return nil, openAIInvalid("input", msgRespNoOutput, it.CallID)
			}
			calls[it.CallID] = true
			args := it.Arguments
			if it.Type == "custom_tool_call" {
				b, _ := json.Marshal(map[string]string{"input": it.Input})
				args = string(b)
			}
			c.add("assistant", Block{Type: "tool_use", ID: it.CallID, Name: it.Name, Input: json.RawMessage(orJSON(args))})
		case "function_call_output", "custom_tool_call_output":
			if !calls[it.CallID] {
				return nil, openAIInvalid("input", msgRespNoCall, it.CallID)
			}
			content, _ := json.Marshal(textOf(it.Output))
			c.add("user", Block{Type: "tool_result", ToolUseID: it.CallID, Content: content})
		}
	}
	if len(c.r.Messages) == 0 {
		c.r.Messages = []Message{{Role: "user", Content: Content{Blocks: []Block{{Type: "text", Text: "(empty)"}}}}}
	}
	return &c.r, nil
}

// countOpenAI is the fake's token count of an OpenAI request: the bytes of
// its instructions, input, messages and tools, divided by 4, rounded up.
func countOpenAI(body []byte) int {
	var f map[string]json.RawMessage
	if json.Unmarshal(body, &f) != nil {
		return (len(body) + 3) / 4
	}
	return (len(f["instructions"]) + len(f["input"]) + len(f["messages"]) + len(f["tools"]) + 3) / 4
}

// serveOpenAI answers /v1/responses and /v1/chat/completions.
func (p *Provider) serveOpenAI(w http.ResponseWriter, req *http.Request, rec Request) {
	fail := func(e *OpenAIError) {
		rec.Status, rec.Error = e.Status, e.Message
		p.record(rec)
		writeOpenAIError(w, e)
	}
	key := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	if key == "" {
		fail(&OpenAIError{Status: 401, Type: "invalid_request_error", Message: msgOpenAINoKey})
		return
	}
	if p.cfg.APIKey != "" && key != p.cfg.APIKey {
		fail(&OpenAIError{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: fmt.Sprintf(msgOpenAIBadKey, key)})
		return
	}
	responses := rec.Path == "/v1/responses"
	var r *MessagesRequest
	var e *OpenAIError
	var cr chatRequest
	var rr responsesRequest
	if responses {
		if err := json.Unmarshal(rec.Body, &rr); err != nil {
			fail(openAIInvalid("", msgOpenAIBadJSON))
			return
		}
		r, e = canonResponses(&rr)
	} else {
		if err := json.Unmarshal(rec.Body, &cr); err != nil {
			fail(openAIInvalid("", msgOpenAIBadJSON))
			return
		}
		r, e = canonChat(&cr)
	}
	if e != nil {
		fail(e)
		return
	}
	rec.Parsed = r
	rec.Tokens = countOpenAI(rec.Body)
	threshold := 0
	if responses {
		if len(rr.ContextManagement) > 0 && !p.cfg.ServerCompaction {
			fail(&OpenAIError{Status: 400, Type: "invalid_request_error", Param: "context_management", Code: "unknown_parameter", Message: msgOpenAIUnknownParam})
			return
		}
		for _, cm := range rr.ContextManagement {
			if cm.Type == "compaction" {
				threshold = cm.CompactThreshold
			}
		}
		rec.Tokens = billedResponses(rec.Body)
	}
	p.mu.Lock()
	if p.window == 0 && findTools(r.Tools).shell != "" {
		p.window = rec.Tokens + p.cfg.Headroom
	}
	window := p.window
	p.mu.Unlock()
	if window == 0 {
		window = p.cfg.WindowTokens
	}
	if rec.Tokens > window {
		e := &OpenAIError{Status: 400, Type: "invalid_request_error", Code: "context_length_exceeded"}
		if responses {
			e.Param, e.Message = "input", msgResponsesTooLong
		} else {
			e.Param, e.Message = "messages", fmt.Sprintf(msgChatTooLong, window, rec.Tokens)
		}
		fail(e)
		return
	}
	if f, ok := p.nextFault(); ok {
		rec.Status, rec.Step, rec.Error = openAIFault(f.Status).Status, StepFault, openAIFault(f.Status).Message
		if f.MidStream && responses && r.Stream {
			rec.Status = 200
		}
		p.record(rec)
		writeOpenAIFault(w, f, responses, r.Stream, r.Model)
		return
	}
	pl := p.decide(r)
	rec.Status, rec.Step = 200, pl.step
	compaction := ""
	if responses && threshold > 0 && rec.Tokens > threshold {
		// Server-side compaction: an opaque item first; the answer's input
		// is the compacted context.
		compaction = "gAAAAB" + Sign(p.cfg.CompactionSummary)
		rec.Compacted = true
	}
	p.record(rec)
	// The tool call id, deterministic in the conversation as in answer().
	var conv json.RawMessage
	if responses {
		conv = rr.Input
	} else {
		conv, _ = json.Marshal(cr.Messages)
	}
	callID := ""
	var args []byte
	if pl.step == StepShell || pl.step == StepWrite {
		callID = "call_" + toolID(normalizeMarkers(conv), pl.step, pl.round)[8:]
		args, _ = json.Marshal(pl.input)
		p.mu.Lock()
		p.issued[callID] = pl.step
		p.mu.Unlock()
	}
	text := pl.text
	if callID != "" {
		text = fmt.Sprintf("Running step %s.", pl.step)
	}
	u := openAIUsage{in: rec.Tokens, out: (len(text) + len(args) + 3) / 4}
	if compaction != "" {
		u.in = (len(compaction) + 3) / 4
	}
	if responses {
		reasoning := len(rr.Reasoning) > 0 && string(rr.Reasoning) != "null" && !p.cfg.NoThinking
		p.respond(w, rr.Model, rr.Stream, reasoning, pl, text, callID, string(args), compaction, u)
		return
	}
	includeUsage := cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage
	p.complete(w, cr.Model, cr.Stream, includeUsage, pl, text, callID, string(args), u)
}

type openAIUsage struct{ in, out int }

// respond writes a Responses answer: output items (a reasoning item when the
// request asked for reasoning, a message, a function_call), streamed as
// response.created, response.in_progress, per item output_item.added /
// deltas / output_item.done, then response.completed with usage; or the whole
// response object.
func (p *Provider) respond(w http.ResponseWriter, model string, stream, reasoning bool, pl plan, text, callID, args, compaction string, u openAIUsage) {
	id := "resp_" + newRequestID()[12:36]
	now := time.Now().Unix()
	var items []map[string]any
	if compaction != "" {
		items = append(items, map[string]any{"id": "cmp_" + id[5:], "type": "compaction", "encrypted_content": compaction})
	}
	if reasoning {
		sum := fmt.Sprintf("Step %s of the scripted task.", pl.step)
		items = append(items, map[string]any{"id": "rs_" + id[5:], "type": "reasoning",
			"summary":           []any{map[string]any{"type": "summary_text", "text": sum}},
			"encrypted_content": Sign(sum)})
	}
	items = append(items, map[string]any{"id": "msg_" + id[5:], "type": "message", "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	if callID != "" && pl.code {
		items = append(items, map[string]any{"id": "ctc_" + id[5:], "type": "custom_tool_call", "status": "completed",
			"call_id": callID, "name": pl.tool, "input": pl.input["input"]})
	} else if callID != "" {
		items = append(items, map[string]any{"id": "fc_" + id[5:], "type": "function_call", "status": "completed",
			"call_id": callID, "name": pl.tool, "arguments": args})
	}
	usage := map[string]any{"input_tokens": u.in, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": u.out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": u.in + u.out}
	resp := func(status string, output []map[string]any, withUsage bool) map[string]any {
		r := map[string]any{"id": id, "object": "response", "created_at": now, "status": status, "model": model,
			"output": output, "usage": nil, "error": nil, "incomplete_details": nil}
		if withUsage {
			r["usage"] = usage
		}
		return r
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(resp("completed", items, true))
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	seq := 0
	send := func(typ string, data map[string]any) {
		data["type"] = typ
		data["sequence_number"] = seq
		seq++
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if fl != nil {
			fl.Flush()
		}
	}
	send("response.created", map[string]any{"response": resp("in_progress", []map[string]any{}, false)})
	send("response.in_progress", map[string]any{"response": resp("in_progress", []map[string]any{}, false)})
	for i, it := range items {
		added := map[string]any{}
		for k, v := range it {
			added[k] = v
		}
		switch it["type"] {
		case "message":
			added["status"], added["content"] = "in_progress", []any{}
		case "function_call":
			added["status"], added["arguments"] = "in_progress", ""
		case "custom_tool_call":
			added["status"], added["input"] = "in_progress", ""
		}
		send("response.output_item.added", map[string]any{"output_index": i, "item": added})
		switch it["type"] {
		case "message":
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			send("response.content_part.added", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "part": part})
			for _, c := range chunks(text, p.cfg.ChunkBytes) {
				send("response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "delta": c})
			}
			send("response.output_text.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "text": text})
			send("response.content_part.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		case "function_call":
			for _, c := range chunks(args, p.cfg.ChunkBytes) {
				send("response.function_call_arguments.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": c})
			}
			send("response.function_call_arguments.done", map[string]any{"item_id": it["id"], "output_index": i, "arguments": args})
		case "custom_tool_call":
			in := it["input"].(string)
			for _, c := range chunks(in, p.cfg.ChunkBytes) {
				send("response.custom_tool_call_input.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": c})
			}
			send("response.custom_tool_call_input.done", map[string]any{"item_id": it["id"], "output_index": i, "input": in})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	send("response.completed", map[string]any{"response": resp("completed", items, true)})
}

// complete writes a Chat Completions answer: chunks (role, content deltas,
// tool call deltas, the finish_reason, a usage chunk when the client asked
// with stream_options.include_usage) then "data: [DONE]"; or the whole
// chat.completion object.
func (p *Provider) complete(w http.ResponseWriter, model string, stream, includeUsage bool, pl plan, text, callID, args string, u openAIUsage) {
	id := "chatcmpl-" + newRequestID()[12:36]
	now := time.Now().Unix()
	finish := "stop"
	if callID != "" {
		finish = "tool_calls"
	}
	usage := map[string]any{"prompt_tokens": u.in, "completion_tokens": u.out, "total_tokens": u.in + u.out}
	if !stream {
		msg := map[string]any{"role": "assistant", "content": text}
		if callID != "" {
			msg["tool_calls"] = []any{map[string]any{"id": callID, "type": "function", "function": map[string]any{"name": pl.tool, "arguments": args}}}
		}
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion", "created": now, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	send := func(choices []any, extra map[string]any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": now, "model": model, "choices": choices}
		for k, v := range extra {
			c[k] = v
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	choice := func(delta map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}
	}
	send(choice(map[string]any{"role": "assistant", "content": ""}, nil), nil)
	for _, c := range chunks(text, p.cfg.ChunkBytes) {
		send(choice(map[string]any{"content": c}, nil), nil)
	}
	if callID != "" {
		send(choice(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": callID, "type": "function",
			"function": map[string]any{"name": pl.tool, "arguments": ""}}}}, nil), nil)
		for _, c := range chunks(args, p.cfg.ChunkBytes) {
			send(choice(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": c}}}}, nil), nil)
		}
	}
	send(choice(map[string]any{}, finish), nil)
	if includeUsage {
		send([]any{}, map[string]any{"usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}
