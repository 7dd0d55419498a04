package summarizer

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// A proxied Chat Completions session's summary request starts with the
// client's own leading system message, byte for byte, as the client's
// requests do — not the session's prompt as one JSON-quoted string, which
// the model would read as JSON and which would share no cached prefix with
// the agent's requests.
func TestChatSummaryStartsWithTheClientsSystemMessage(t *testing.T) {
	fake := fakeprovider.Start(t, fakeprovider.Config{APIKey: "sk-client", NoThinking: true})
	req := sampleRequest()
	sysMsg := `{"role":"system","content":"You are an expert coding assistant."}`
	req.System = sysMsg // what the session stores for a Chat prefix (its estimate's text)
	b := config.Binding{Name: "pi-own", Provider: ProviderOpenAI, Model: "gpt-local-1", BaseURL: fake.URL(),
		Credential: &config.Credential{Authorization: "Bearer sk-client", Prefix: []byte("[" + sysMsg + "]")}}
	if _, err := newTestSummarizer().Summarize(context.Background(), []config.Binding{b}, req, nil); err != nil {
		t.Fatal(err)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 || reqs[0].Refused() {
		t.Fatalf("%d upstream requests: %+v", len(reqs), reqs)
	}
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) < 2 || string(body.Messages[0]) != sysMsg {
		t.Fatalf("first message %s, want the client's %s", body.Messages[0], sysMsg)
	}
	var second struct{ Role string }
	_ = json.Unmarshal(body.Messages[1], &second)
	if second.Role == "system" {
		t.Errorf("a second system message follows the client's: %s", body.Messages[1])
	}
}
