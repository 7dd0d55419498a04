package proxy

import (
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/clientcred"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/summarizer"
)

// ClientBinding is the name of the summarizer binding a proxied session
// gets: its own upstream, model and client credential (docs/design.md §10).
const ClientBinding = "proxy-client"

// holdCredential keeps the credential of a session's latest request, with
// what of the request its dialect has a summarizer request carry
// (wire.Dialect.SummaryPrefix).
func (p *Proxy) holdCredential(id string, req *request, h http.Header, fp string) {
	sp := req.d.SummaryPrefix(req.System, req.Tools, req.ToolChoice, req.Messages[:req.Prefix])
	p.creds.Hold(id, clientcred.Held{FP: fp, Model: req.Model, Cred: clientcred.Credential(h, sp)}, p.red.HoldHeader(h))
}

// sessionBindings is the engine's SessionBindingsFunc: a proxied session
// (labelled "proxy") is summarized through its own upstream, model and
// client credential, in the API its client speaks, then the extractive
// fallback — unless proxy.summarizer is "bindings", which keeps the
// operator's configured bindings. Errors: clientcred.ErrNotAccepted,
// clientcred.ErrNoCredential.
func (p *Proxy) sessionBindings(id string, labels map[string]string) ([]config.Binding, bool, error) {
	api := labels[engine.LabelProxy]
	if api == "" {
		return nil, false, nil
	}
	c, ok, err := p.creds.ForSummary(id, p.cfg.Summarizer == config.ProxySummarizerBindings)
	if !ok {
		return nil, false, err
	}
	d := dialectNamed(api)
	return []config.Binding{
		{Name: ClientBinding, Provider: d.SummarizerProvider(), Model: c.Model, BaseURL: p.upstreamURL(d.Upstream()).String(), Credential: &c.Cred},
		{Name: summarizer.ProviderExtractive, Provider: summarizer.ProviderExtractive},
	}, true, nil
}

// dialectNamed is the dialect of a session's "proxy" label; a label of no
// dialect is taken for Chat Completions, the API every OpenAI-compatible
// upstream serves.
func dialectNamed(name string) dialect {
	for _, d := range []dialect{dialectAnthropic, dialectResponses} {
		if d.Name() == name {
			return d
		}
	}
	return dialectChat
}

// headerHasToken reports whether a comma-separated header of h holds
// token, case-insensitively.
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
