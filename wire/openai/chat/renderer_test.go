package chat

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/wire"
)

// The Chat renderer sends the client's body with the messages replaced,
// the client's own bytes for a message ctxd did not rewrite, and asks for
// the usage chunk of a stream whose client did not (HidesUsage): only
// then is "stream_options" added.
func TestRendererAsksForTheUsageTheClientDidNot(t *testing.T) {
	msgs := []history.Message{{Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: "hi"}}}}
	for _, c := range []struct {
		name, body string
		wantUsage  bool
	}{
		{"stream without stream_options", `{"model":"m","stream":true,"messages":[{"role":"user", "content":"hi"}]}`, true},
		{"stream with stream_options", `{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user", "content":"hi"}]}`, false},
		{"no stream", `{"model":"m","messages":[{"role":"user", "content":"hi"}]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := wire.Scan([]byte(c.body), Dialect{})
			if err != nil {
				t.Fatal(err)
			}
			req := &wire.RenderRequest{Body: []byte(c.body), MsgStart: w.MsgStart, MsgEnd: w.MsgEnd, Items: w.Messages,
				Prefix: w.Prefix, Stream: w.Stream, StreamOptions: w.StreamOptions}
			out, err := Dialect{}.NewRenderer().Render(msgs, req)
			if err != nil {
				t.Fatal(err)
			}
			got := string(out.Bytes())
			if !strings.Contains(got, `"messages":[{"role":"user", "content":"hi"}]`) {
				t.Fatalf("the client's message is not sent as its bytes: %s", got)
			}
			if asked := strings.Contains(got, `"stream_options":{"include_usage":true}`); asked != c.wantUsage {
				t.Fatalf("usage asked for: %v, want %v: %s", asked, c.wantUsage, got)
			}
			if !c.wantUsage && got != c.body {
				t.Fatalf("the body changed: %s", got)
			}
		})
	}
}
