package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
	"github.com/ctxd/ctxd/internal/strict"
)

const bashTool = `{"name":"bash","description":"Run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}`

// body builds a Messages request with the bash tool and the given messages
// (a JSON array's inside); thinking adds "thinking": enabled.
func body(thinking bool, msgs string) string {
	th := ""
	if thinking {
		th = `"thinking":{"type":"enabled","budget_tokens":2048},`
	}
	return `{"model":"claude-test","max_tokens":1024,` + th + `"tools":[` + bashTool + `],"messages":[` + msgs + `]}`
}

// post sends a request to the fake and returns its status and body.
func post(t *testing.T, p *Provider, path, b string, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.URL()+path, strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-api-key", "sk-ant-test")
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// errorMessage returns error.message of an error body, failing t when the
// body is not in the real API's error shape.
func errorMessage(t *testing.T, b []byte) (typ, msg string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || !strings.HasPrefix(e.RequestID, "req_") {
		t.Fatalf("not an Anthropic error body (type error, error{type,message}, request_id req_…): %s", b)
	}
	return e.Error.Type, e.Error.Message
}

// validateCase is a hand-made request and the real API's answer to it.
type validateCase struct {
	name     string
	thinking bool
	msgs     string
	want     string // "" = accepted
}

// validateCases are requests that each break one rule of docs/design.md §4a, with
// the real 400 text, and valid variants.
func validateCases() []validateCase {
	sig := Sign("t1")
	th := `{"type":"thinking","thinking":"t1","signature":"` + sig + `"}`
	use := func(id string) string {
		return `{"type":"tool_use","id":"` + id + `","name":"bash","input":{"command":"ls"}}`
	}
	res := func(id string) string {
		return `{"type":"tool_result","tool_use_id":"` + id + `","content":"ok"}`
	}
	user := `{"role":"user","content":"go"}`
	asst := func(blocks ...string) string {
		return `{"role":"assistant","content":[` + strings.Join(blocks, ",") + `]}`
	}
	results := func(blocks ...string) string {
		return `{"role":"user","content":[` + strings.Join(blocks, ",") + `]}`
	}
	text := func(s string) string { return `{"type":"text","text":` + strconv.Quote(s) + `}` }
	return []validateCase{
		{"first message from the assistant", false, asst(text("hi")) + `,` + user, msgFirstNotUser},
		{"tool_use without tool_result", false, user + `,` + asst(text("a"), use("toolu_A")) + `,` + user,
			"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{"one of two tool_use without result", false, user + `,` + asst(use("toolu_A"), use("toolu_B")) + `,` + results(res("toolu_B")),
			"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{"orphan tool_result first", false, results(res("toolu_B")),
			"messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_B. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
		{"orphan tool_result later", false, user + `,` + asst(text("a")) + `,` + results(text("x"), res("toolu_B")),
			"messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_B. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
		{"duplicate tool_use id", false, user + `,` + asst(use("toolu_A")) + `,` + results(res("toolu_A")) + `,` + asst(use("toolu_A")) + `,` + results(res("toolu_A")),
			"messages.3.content.0: `tool_use` ids must be unique"},
		{"empty text block", false, results(text("")), msgEmptyText},
		{"whitespace text block", false, results(text(" \n")), msgWhitespaceText},
		{"empty content array", false, results(), "messages.0: all messages must have non-empty content except for the optional final assistant message"},
		{"empty string content", false, user + `,` + asst(text("a")) + `,{"role":"user","content":""}`, "messages.2: all messages must have non-empty content except for the optional final assistant message"},
		{"thinking on: open loop without thinking first", true, user + `,` + asst(use("toolu_A")) + `,` + results(res("toolu_A")),
			"messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"},
		{"thinking on: thinking not first", true, user + `,` + asst(text("a"), th, use("toolu_A")) + `,` + results(res("toolu_A")),
			"messages.1.content.0: If an assistant message contains any thinking blocks, the first block must be thinking or redacted_thinking. Found text."},
		{"thinking on: assistant ends with thinking", true, user + `,` + asst(th) + `,` + user,
			"messages.1: The final block in an assistant message cannot be `thinking`."},
		{"thinking off: last assistant carries thinking", false, user + `,` + asst(th, use("toolu_A")) + `,` + results(res("toolu_A")),
			"messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."},
		{"modified thinking text", true, user + `,` + asst(`{"type":"thinking","thinking":"t1 edited","signature":"`+sig+`"}`, use("toolu_A")) + `,` + results(res("toolu_A")),
			"messages.1.content.0: Invalid `signature` in `thinking` block"},

		{"valid: one user message", false, user, ""},
		{"valid: thinking on, open loop with thinking first", true, user + `,` + asst(th, text("a"), use("toolu_A")) + `,` + results(res("toolu_A")), ""},
		{"valid: thinking on, redacted_thinking first", true, user + `,` + asst(`{"type":"redacted_thinking","data":"abc"}`, use("toolu_A")) + `,` + results(res("toolu_A")), ""},
		{"thinking off: assistant prefill with thinking", false, user + `,` + asst(th, text("a")),
			"messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."},
		{"valid: thinking off, the last assistant's turn is over", false, user + `,` + asst(th, text("a")) + `,` + user, ""},
		{"valid: thinking off, thinking only in an earlier turn", false, user + `,` + asst(th, text("a")) + `,` + user + `,` + asst(text("b")) + `,` + user, ""},
		{"valid: Claude Code's system entry after the first message", false, user + `,{"role":"system","content":"agents"},` + asst(use("toolu_A")) + `,` + results(res("toolu_A")), ""},
		{"valid: parallel tool calls answered together", false, user + `,` + asst(use("toolu_A"), use("toolu_B")) + `,` + results(res("toolu_B"), res("toolu_A")), ""},
	}
}

// TestValidateRefuses sends hand-made requests that each break one rule of
// docs/design.md §4a (or a basic field rule) and checks the fake answers the real
// API's 400 with its exact text; the valid variants pass.
func TestValidateRefuses(t *testing.T) {
	tests := validateCases()
	p := Start(t, Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, b := post(t, p, "/v1/messages", body(tc.thinking, tc.msgs), nil)
			if tc.want == "" {
				if status != 200 {
					t.Fatalf("status %d, want 200: %s", status, b)
				}
				return
			}
			if status != 400 {
				t.Fatalf("status %d, want 400: %s", status, b)
			}
			typ, msg := errorMessage(t, b)
			if typ != "invalid_request_error" || msg != tc.want {
				t.Fatalf("got %s %q\nwant invalid_request_error %q", typ, msg, tc.want)
			}
		})
	}
	if n := len(p.Refused()); n != 16 {
		t.Errorf("recorded %d refused requests, want 16", n)
	}
}

// TestErrorBodiesAreTheRealOnes renders the fake's context-length and
// tool-pairing errors with the figures of the real bodies in the corpus and
// compares them byte for byte.
func TestErrorBodiesAreTheRealOnes(t *testing.T) {
	tooLong := regexp.MustCompile(`"message":"prompt is too long: (\d+) tokens > (\d+) maximum"`)
	plusMax := regexp.MustCompile("exceed context limit: (\\d+) \\+ (\\d+) > (\\d+),")
	noResult := regexp.MustCompile(`messages\.(\d+): ` + "`tool_use`" + ` ids were found without .*immediately after: (\w+)\.`)
	reqID := regexp.MustCompile(`"request_id":"(req_\w+)"`)
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	compared := 0
	for _, e := range corpustest.ErrorBodies(t) {
		if e.Body == nil || e.Status != 400 || !strings.HasPrefix(e.ID, "anthropic_") {
			continue
		}
		id := ""
		if m := reqID.FindStringSubmatch(*e.Body); m != nil {
			id = m[1]
		}
		var got *APIError
		switch m := tooLong.FindStringSubmatch(*e.Body); {
		case m != nil:
			got = invalidRequest(msgPromptTooLong, atoi(m[1]), atoi(m[2]))
		case plusMax.MatchString(*e.Body):
			m := plusMax.FindStringSubmatch(*e.Body)
			got = invalidRequest(msgInputPlusMaxTokens, atoi(m[1]), atoi(m[2]), atoi(m[3]))
		case noResult.MatchString(*e.Body):
			m := noResult.FindStringSubmatch(*e.Body)
			got = invalidRequest(msgToolUseNoResult, atoi(m[1]), m[2])
		default:
			continue
		}
		if string(got.Body(id)) != *e.Body {
			t.Errorf("%s:\n got %s\nwant %s", e.ID, got.Body(id), *e.Body)
		}
		compared++
	}
	if compared < 6 {
		t.Fatalf("compared %d corpus bodies, want the 6 Anthropic context-length and tool-pairing ones", compared)
	}
}

// TestContextWindow checks the window: a request over it gets the real
// "prompt is too long" 400 with its own figures; at the window it passes;
// CheckMaxTokens adds the max_tokens variant; Headroom sets the window from
// the first task request.
func TestContextWindow(t *testing.T) {
	b := body(false, `{"role":"user","content":"`+strings.Repeat("x", 4000)+`"}`)
	n := CountTokens([]byte(b))
	if n < 1000 || n > 1200 {
		t.Fatalf("CountTokens = %d for %d bytes, want about bytes/4", n, len(b))
	}

	p := Start(t, Config{WindowTokens: n})
	if status, out := post(t, p, "/v1/messages", b, nil); status != 200 {
		t.Fatalf("at the window: status %d: %s", status, out)
	}
	p.SetWindow(n - 1)
	status, out := post(t, p, "/v1/messages", b, nil)
	if status != 400 {
		t.Fatalf("over the window: status %d: %s", status, out)
	}
	if _, msg := errorMessage(t, out); msg != fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, n-1) {
		t.Fatalf("message %q", msg)
	}

	p2 := Start(t, Config{WindowTokens: n + 1000, CheckMaxTokens: true})
	status, out = post(t, p2, "/v1/messages", b, nil)
	if _, msg := errorMessage(t, out); status != 400 || msg != fmt.Sprintf("input length and `max_tokens` exceed context limit: %d + 1024 > %d, decrease input length or `max_tokens` and try again", n, n+1000) {
		t.Fatalf("status %d message %q", status, msg)
	}

	p3 := Start(t, Config{Headroom: 10})
	if status, out := post(t, p3, "/v1/messages", b, nil); status != 200 || p3.Window() != n+10 {
		t.Fatalf("Headroom: status %d window %d, want 200 and %d: %s", status, p3.Window(), n+10, out)
	}
	bigger := body(false, `{"role":"user","content":"`+strings.Repeat("x", 4100)+`"}`)
	if status, _ := post(t, p3, "/v1/messages", bigger, nil); status != 400 {
		t.Fatalf("Headroom: a request 25 tokens larger got %d, want 400", status)
	}
}

// TestRoutesAndHeaders checks what the fake answers besides messages: HEAD /
// and unknown paths 404 (not_found_error), count_tokens, missing or wrong
// credentials 401, a missing anthropic-version 400, malformed JSON 400.
func TestRoutesAndHeaders(t *testing.T) {
	p := Start(t, Config{APIKey: "sk-ant-right"})
	resp, err := http.Head(p.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("HEAD /: %d, want 404", resp.StatusCode)
	}
	resp, err = http.Get(p.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if typ, msg := errorMessage(t, b); resp.StatusCode != 404 || typ != "not_found_error" || msg != "Not Found" {
		t.Errorf("GET /v1/models: %d %s %q", resp.StatusCode, typ, msg)
	}

	ok := map[string]string{"x-api-key": "sk-ant-right"}
	msgs := `{"role":"user","content":"hello"}`
	status, b := post(t, p, "/v1/messages/count_tokens", body(false, msgs), ok)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	if json.Unmarshal(b, &ct); status != 200 || ct.InputTokens != CountTokens([]byte(body(false, msgs))) {
		t.Errorf("count_tokens: %d %s", status, b)
	}
	for _, tc := range []struct {
		name    string
		hdr     map[string]string
		payload string
		status  int
		typ     string
		msg     string
	}{
		{"no key", map[string]string{"x-api-key": ""}, body(false, msgs), 401, "authentication_error", "x-api-key header is required"},
		{"wrong key", nil, body(false, msgs), 401, "authentication_error", "invalid x-api-key"},
		{"bearer key", map[string]string{"x-api-key": "", "Authorization": "Bearer sk-ant-right"}, body(false, msgs), 200, "", ""},
		{"no version", map[string]string{"x-api-key": "sk-ant-right", "anthropic-version": ""}, body(false, msgs), 400, "invalid_request_error", "anthropic-version: header is required"},
		{"malformed JSON", ok, `{"model":`, 400, "invalid_request_error", "There was an error parsing the body of your request"},
		{"no max_tokens", ok, `{"model":"m","messages":[` + msgs + `]}`, 400, "invalid_request_error", "max_tokens: Field required"},
		{"no messages", ok, `{"model":"m","max_tokens":5,"messages":[]}`, 400, "invalid_request_error", "messages: at least one message is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := post(t, p, "/v1/messages?beta=true", tc.payload, tc.hdr)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, b)
			}
			if tc.status == 200 {
				return
			}
			if typ, msg := errorMessage(t, b); typ != tc.typ || msg != tc.msg {
				t.Fatalf("got %s %q, want %s %q", typ, msg, tc.typ, tc.msg)
			}
		})
	}
}

// TestAgreesWithCtxdValidator runs ctxd's own validator of the provider
// rules (internal/strict over history.CheckRequest) on the same requests: an
// independent fake and ctxd must agree on what the provider refuses. Known
// differences are listed with their reason and logged, so a change on either
// side shows.
func TestAgreesWithCtxdValidator(t *testing.T) {
	known := map[string]string{
		"modified thinking text": "only the provider can verify a signature",
		"thinking off: last assistant carries thinking": "history.CheckRequest applies the thinking-off rule to the final message only, " +
			"the fake also to the assistant message of an open tool loop (thinking cannot be switched off inside a turn)",
	}
	for _, tc := range validateCases() {
		t.Run(tc.name, func(t *testing.T) {
			mode := history.ThinkingOff
			if tc.thinking {
				mode = history.ThinkingOn
			}
			vs, err := strict.Anthropic(arrayForm(t, body(tc.thinking, tc.msgs)), mode, false)
			if err != nil {
				t.Fatal(err)
			}
			fake, ctxd := tc.want != "", len(vs) > 0
			if fake == ctxd {
				return
			}
			if why, ok := known[tc.name]; ok {
				t.Logf("known difference (fake refuses %v, ctxd refuses %v): %s", fake, ctxd, why)
				return
			}
			t.Errorf("the fake refuses: %v (%s); ctxd's validator refuses: %v (%v)", fake, tc.want, ctxd, vs)
		})
	}
}

// arrayForm rewrites string contents (a message's, a tool_result's) as
// arrays of one text block, the only form ctxd's renderer, and so its
// validator's reader, uses.
func arrayForm(t *testing.T, b string) []byte {
	t.Helper()
	var req map[string]any
	if err := json.Unmarshal([]byte(b), &req); err != nil {
		t.Fatal(err)
	}
	wrap := func(v any) any {
		if s, ok := v.(string); ok {
			return []any{map[string]any{"type": "text", "text": s}}
		}
		return v
	}
	for _, m := range req["messages"].([]any) {
		msg := m.(map[string]any)
		msg["content"] = wrap(msg["content"])
		for _, blk := range msg["content"].([]any) {
			if bl := blk.(map[string]any); bl["type"] == "tool_result" {
				bl["content"] = wrap(bl["content"])
			}
		}
	}
	out, _ := json.Marshal(req)
	return out
}
