package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/ctxd/ctxd/internal/rawjson"
)

// Shape "server" (docs/design.md §10): where the engine says it is in effect
// (engine.ServerShape: compaction.shape "server", a model with
// server_compaction, an API that has it, an upstream that did not refuse
// it), the outgoing request carries the provider's own compaction and the
// compaction block the provider answers with becomes the session's
// checkpoint (the engine records it when the answer is appended).
//
//   - Anthropic Messages: the context_management edit
//     {"type":"compact_20260112","trigger":{"type":"input_tokens","value":N}},
//     as in the corpus's recorded request, under the anthropic-beta
//     compact-2026-01-12; N is the session's threshold, which must be at
//     least the API's minimum trigger of 50,000 tokens.
//   - OpenAI Responses: the context_management entry
//     {"type":"compaction","compact_threshold":N}.
//
// The client's own context_management is kept: the edit is added to its
// edits (or entries) unless it has a compaction of its own. An upstream
// that refuses the parameter (a 400 naming it, or the beta) makes the
// session fall back to the summarizer (engine.RefuseServerShape), and the
// request is sent once more without it.
const (
	anthropicCompactEdit = "compact_20260112"
	anthropicCompactBeta = "compact-2026-01-12"
	// anthropicCompactMin is the smallest trigger Anthropic accepts, in
	// tokens.
	anthropicCompactMin = 50000
	responsesCompaction = "compaction"
)

// withServerShape adds the provider's compaction to out, the outgoing
// body, when shape server is in effect for the plan's session; it sets
// pl.server and, for Anthropic, pl.beta. out is returned unchanged
// otherwise.
func (p *Proxy) withServerShape(ctx context.Context, pl *plan, req *request, out *outBody) *outBody {
	pl.server, pl.beta = false, ""
	if pl.noServer || (req.d != dialectAnthropic && req.d != dialectResponses) {
		return out
	}
	sh, err := p.eng.ServerShape(ctx, pl.b.id)
	if err != nil || !sh.Active {
		return out
	}
	var next []byte
	switch req.d {
	case dialectAnthropic:
		if sh.Trigger < anthropicCompactMin {
			why := fmt.Sprintf("the session's threshold of %d tokens is below Anthropic's minimum compaction trigger of %d", sh.Trigger, anthropicCompactMin)
			_ = p.eng.RefuseServerShape(ctx, pl.b.id, why)
			return out
		}
		edit := fmt.Sprintf(`{"type":%q,"trigger":{"type":"input_tokens","value":%d}}`, anthropicCompactEdit, sh.Trigger)
		next, err = withAnthropicEdit(out.bytes(), edit)
		pl.beta = anthropicCompactBeta
	case dialectResponses:
		entry := fmt.Sprintf(`{"type":%q,"compact_threshold":%d}`, responsesCompaction, sh.Trigger)
		next, err = withResponsesEntry(out.bytes(), entry)
	}
	if err != nil {
		p.log.Warn("shape server: the request's context_management is not one ctxd can extend; sent without the provider's compaction", "session", pl.b.id, "err", err)
		pl.beta = ""
		return out
	}
	pl.server = true
	return bodyOf(next)
}

// withAnthropicEdit adds edit to the body's context_management.edits
// (creating the member when the client sent none); a client edit of the
// same type is kept instead.
func withAnthropicEdit(body []byte, edit string) ([]byte, error) {
	start, end, ok := rawjson.MemberRange(body, "context_management")
	if !ok {
		return rawjson.WithMember(body, `"context_management":{"edits":[`+edit+`]}`), nil
	}
	var cm map[string]json.RawMessage
	if err := json.Unmarshal(body[start:end], &cm); err != nil || cm == nil {
		return nil, fmt.Errorf("context_management: not an object")
	}
	var edits []json.RawMessage
	if raw, ok := cm["edits"]; ok {
		if err := json.Unmarshal(raw, &edits); err != nil {
			return nil, fmt.Errorf("context_management.edits: not an array")
		}
	}
	for _, e := range edits {
		if typeOf(e) == anthropicCompactEdit {
			return body, nil
		}
	}
	cm["edits"], _ = json.Marshal(append(edits, json.RawMessage(edit)))
	v, err := json.Marshal(cm)
	if err != nil {
		return nil, err
	}
	return rawjson.Splice(body, start, end, v), nil
}

// withResponsesEntry adds entry to the body's context_management array
// (creating it when absent); a client compaction entry is kept instead.
func withResponsesEntry(body []byte, entry string) ([]byte, error) {
	start, end, ok := rawjson.MemberRange(body, "context_management")
	if !ok {
		return rawjson.WithMember(body, `"context_management":[`+entry+`]`), nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(body[start:end], &entries); err != nil {
		return nil, fmt.Errorf("context_management: not an array")
	}
	for _, e := range entries {
		if typeOf(e) == responsesCompaction {
			return body, nil
		}
	}
	v, _ := json.Marshal(append(entries, json.RawMessage(entry)))
	return rawjson.Splice(body, start, end, v), nil
}

func typeOf(raw json.RawMessage) string {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &t)
	return t.Type
}

// withBeta adds beta to the request's anthropic-beta header (a comma list
// the client may have started), once.
func withBeta(h http.Header, beta string) {
	var have []string
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				if b == beta {
					return
				}
				have = append(have, b)
			}
		}
	}
	h.Set("Anthropic-Beta", strings.Join(append(have, beta), ","))
}

// isServerShapeRefusal reports whether an upstream 4xx refuses the
// provider's compaction ctxd added: a 400 or 422 whose message names the
// context_management parameter, the edit or the beta.
func isServerShapeRefusal(d dialect, status int, body []byte) (string, bool) {
	if status != http.StatusBadRequest && status != http.StatusUnprocessableEntity {
		return "", false
	}
	msg, ok := d.errorMessage(body)
	if !ok {
		msg = string(body)
	}
	for _, s := range []string{"context_management", anthropicCompactEdit, anthropicCompactBeta, "compact_threshold"} {
		if strings.Contains(msg, s) {
			if len(msg) > 200 {
				msg = msg[:200] + "…"
			}
			return fmt.Sprintf("upstream status %d: %s", status, msg), true
		}
	}
	return "", false
}

// recoverServerShape answers an upstream refusal of the provider's
// compaction: the session falls back to the summarizer, and the request
// goes once more without it. False when the retry could not be built.
func (p *Proxy) recoverServerShape(w http.ResponseWriter, r *http.Request, x *exchange, pl *plan, req *request, why string) bool {
	ctx := r.Context()
	if err := p.eng.RefuseServerShape(ctx, pl.b.id, why); err != nil {
		return false
	}
	pl.noServer = true
	out, diag, err := p.assemble(ctx, pl, req)
	if err != nil {
		p.log.Warn("retry without the provider's compaction not built", "session", pl.b.id, "err", err)
		return false
	}
	pl.out = out
	x.body, x.retried, x.overflow, x.server, x.beta = out, true, nil, false, ""
	w.Header().Set(HeaderDiagnostic, headerSafe(joinDiag(diag, "shape server: the upstream refused the provider's compaction; this session falls back to the summarizer")))
	p.rp.ServeHTTP(w, r.WithContext(withExchange(ctx, x)))
	return true
}

func joinDiag(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
