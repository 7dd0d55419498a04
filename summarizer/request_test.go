package summarizer

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
)

func TestAssembleAppendsPromptAsUserMessage(t *testing.T) {
	req := sampleRequest()
	before := cloneRequest(req)
	msgs, err := req.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != len(req.Messages)+1 {
		t.Fatalf("got %d messages, want %d", len(msgs), len(req.Messages)+1)
	}
	last := msgs[len(msgs)-1]
	if last.Role != history.RoleUser || len(last.Content) != 1 || last.Content[0].Text != BuiltinPrompt {
		t.Errorf("trailing message is not the built-in prompt as a user message: %+v", last)
	}
	if !reflect.DeepEqual(msgs[:len(msgs)-1], req.Messages) {
		t.Error("history not carried unchanged")
	}
	req.Prompt = "Summarize for the release notes."
	msgs, _ = req.Assemble()
	if got := msgs[len(msgs)-1].Content[0].Text; got != req.Prompt {
		t.Errorf("agent-file prompt not used: %q", got)
	}
	req.Prompt = ""
	if !reflect.DeepEqual(req, before) {
		t.Error("Assemble modified the request")
	}
}

func TestBuiltinPromptHasHeadings(t *testing.T) {
	for _, h := range Headings() {
		if !strings.Contains(BuiltinPrompt, "\n"+h+"\n") {
			t.Errorf("BuiltinPrompt lacks %q", h)
		}
	}
	for _, want := range []string{"hypotheses", "ruled out", "about to be tried", "Do not call any tools"} {
		if !strings.Contains(BuiltinPrompt, want) {
			t.Errorf("BuiltinPrompt lacks %q", want)
		}
	}
}

func TestCheckClosed(t *testing.T) {
	call := func(ids ...string) history.Message {
		m := history.Message{Role: history.RoleAssistant}
		for _, id := range ids {
			m.Content = append(m.Content, history.Block{Type: history.BlockToolCall, ID: id, Name: "read", Input: json.RawMessage(`{}`)})
		}
		return m
	}
	result := func(id string) history.Message {
		return history.Message{Role: history.RoleTool, ToolCallID: id, Content: []history.Block{{Type: history.BlockText, Text: "ok"}}}
	}
	user := history.Message{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "hi"}}}
	cases := []struct {
		name string
		msgs []history.Message
		ok   bool
	}{
		{"empty", nil, true},
		{"closed round", []history.Message{user, call("a", "b"), result("b"), result("a"), user}, true},
		{"open at end", []history.Message{user, call("a", "b"), result("a")}, false},
		{"open before user", []history.Message{user, call("a"), user, result("a")}, false},
		{"orphan result", []history.Message{user, result("x")}, false},
		{"duplicate result", []history.Message{user, call("a"), result("a"), result("a")}, false},
		{"result of an earlier round", []history.Message{call("a"), result("a"), call("b"), result("a")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckClosed(c.msgs)
			if c.ok != (err == nil) {
				t.Fatalf("CheckClosed = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidHistory) {
				t.Errorf("error %v does not wrap ErrInvalidHistory", err)
			}
			req := Request{Messages: c.msgs}
			if _, err := req.Assemble(); c.ok != (err == nil) {
				t.Errorf("Assemble = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// A provider compaction block: the summarizer request starts from its
// summary, as a user message, without what the provider dropped.
func TestAssembleFromAProviderCompaction(t *testing.T) {
	msgs := []history.Message{
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: strings.Repeat("long context ", 1000)}}},
		{Role: history.RoleAssistant, Content: []history.Block{{Type: history.BlockCompaction, Text: "the user said hello"}, {Type: history.BlockText, Text: "Hello!"}}},
		{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "and now?"}}},
	}
	out, err := (&Request{Messages: msgs}).Assemble()
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 || out[0].Role != history.RoleUser || !strings.Contains(out[0].Content[0].Text, "the user said hello") ||
		out[1].Content[0].Text != "Hello!" || len(out[1].Content) != 1 || out[2].Content[0].Text != "and now?" {
		t.Fatalf("assembled %+v", out)
	}
	if len(msgs[1].Content) != 2 {
		t.Fatal("Assemble changed the request's messages")
	}
}
