package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/agenttest"
	"github.com/ctxd/ctxd/internal/fakeprovider"
)

// TestCodexDefaultModelManaged: the README's Codex recipe with Codex's own
// default model (no -m: gpt-6.2-sol, code mode) and no [models] entry in
// the configuration: every request is managed, none passed through, and
// the session's window is the catalog's for that model.
func TestCodexDefaultModelManaged(t *testing.T) {
	agenttest.Bin(t, agenttest.Codex)
	marker := "CTXD-DONE-CODEX-DEFAULT"
	p := fakeprovider.Start(t, fakeprovider.Config{Rounds: 2, OutputBytes: 4000, Marker: marker})
	cfg := testConfig()
	cfg.Proxy.Upstreams.OpenAI.BaseURL = p.URL()
	f := newFixture(t, cfg)
	res := agenttest.Run{Agent: agenttest.Codex, Model: "default", BaseURL: f.url, Prompt: "Run the scripted task.", Timeout: 180e9}.Exec(t)
	agenttest.Log(t, res, p)
	if res.ExitCode != 0 || !strings.Contains(res.FinalText(), marker) {
		t.Fatalf("exit %d, answer %q; proxy logs:\n%s", res.ExitCode, res.FinalText(), tail(f.logs.String()))
	}
	if r := p.Refused(); len(r) != 0 {
		t.Fatalf("%d refused, first: %s", len(r), r[0].Error)
	}
	st := f.p.Stats()
	if st.PassedThrough != 0 || st.Managed == 0 {
		t.Fatalf("proxy stats %+v: Codex's default model is not managed", st)
	}
	ctx := context.Background()
	ids, _ := f.eng.ListSessions(ctx)
	found := false
	for _, id := range ids {
		in, err := f.eng.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("session %s: model %s, window %d (%s)", id, in.Model, in.ContextLimit, in.WindowSource)
		if in.Model == "gpt-6.2-sol" && in.ContextLimit == 500000 && in.WindowSource == engine.WindowCatalog {
			found = true
		}
	}
	if !found {
		t.Error("no session of gpt-6.2-sol with the catalog's 500000-token window")
	}
}
