package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/trigger"
)

// BindingServer is the Binding of a checkpoint that records the provider's
// own compaction (shape "server", docs/design.md §10): its summary is the
// compaction block the provider returned.
const BindingServer = "server"

// ServerShape says whether shape "server" is in effect for a session
// (docs/design.md §10): the provider compacts, ctxd adds the provider's
// compaction to the session's requests and records the block it returns as
// a checkpoint with binding BindingServer.
type ServerShape struct {
	// Active: the provider compacts this session's context.
	Active bool `json:"active"`
	// Trigger is the session's threshold in tokens, the provider's
	// compaction trigger (docs/design.md §5.1).
	Trigger uint64 `json:"trigger,omitempty"`
	// API is the proxied wire API ("anthropic", "responses"), "" for a
	// session of the daemon API.
	API string `json:"api,omitempty"`
	// Why says in one line why it is or is not in effect; "" when the
	// configured shape is not "server".
	Why string `json:"why,omitempty"`
}

// serverAPIs are the proxied wire APIs whose providers compact
// server-side: Anthropic Messages (compact_20260112) and OpenAI Responses
// (context_management compaction). Chat Completions has none.
var serverAPIs = map[string]bool{"anthropic": true, "responses": true}

// serverShape resolves shape "server" for s (docs/design.md §10): in effect when
// the configured shape is "server", the session is proxied to an API with
// server compaction, its model lists server_compaction and the upstream
// has not refused it. Otherwise the session falls back to the summarizer
// bindings (and the extractive fallback). Called with s.mu held.
func (e *Engine) serverShape(s *session) ServerShape {
	if s.shape != trigger.ShapeServer {
		return ServerShape{}
	}
	api := s.meta.Labels[LabelProxy]
	sh := ServerShape{API: api, Trigger: s.threshold}
	switch {
	case api == "":
		sh.Why = `compaction.shape is "server", but the session is not proxied (no upstream to compact it): it falls back to the summarizer bindings`
	case !serverAPIs[api]:
		sh.Why = fmt.Sprintf(`compaction.shape is "server", but the %s API has no server-side compaction: it falls back to the summarizer bindings`, apiName(api))
	case !s.model.ServerCompaction:
		sh.Why = fmt.Sprintf(`compaction.shape is "server", but model %q does not list server_compaction ([models.%q] server_compaction = true if its upstream has it): it falls back to the summarizer bindings`, s.meta.Model, s.meta.Model)
	case s.serverRefused != "":
		sh.Why = `compaction.shape is "server", but the upstream refused the provider's compaction (` + s.serverRefused + `): it falls back to the summarizer bindings`
	default:
		sh.Active = true
		sh.Why = fmt.Sprintf(`compaction.shape is "server": the provider compacts at %d tokens (%s), ctxd records its compaction block as the checkpoint`, s.threshold, apiName(api))
	}
	return sh
}

func apiName(api string) string {
	switch api {
	case "anthropic":
		return "Anthropic Messages"
	case "responses":
		return "OpenAI Responses"
	case "chat":
		return "Chat Completions"
	}
	return api
}

// ServerShape returns whether shape "server" is in effect for session id
// and why (docs/design.md §10). Errors: ErrNotFound, ctx's.
func (e *Engine) ServerShape(ctx context.Context, id string) (ServerShape, error) {
	s, err := e.lock(ctx, id)
	if err != nil {
		return ServerShape{}, err
	}
	defer s.mu.Unlock()
	e.refresh(s)
	return e.serverShape(s), nil
}

// RefuseServerShape records that the session's upstream refused the
// provider's compaction (a beta it does not know, a trigger below its
// minimum): from then on, until the daemon restarts, the session falls
// back to the summarizer bindings, and a diagnostic event says why. why is
// one line, without credentials. Errors: ErrNotFound, ctx's.
func (e *Engine) RefuseServerShape(ctx context.Context, id, why string) error {
	s, err := e.lock(ctx, id)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.serverRefused != "" {
		return nil
	}
	s.serverRefused = why
	d, _ := json.Marshal(map[string]any{"level": api.DiagLevelWarn, "code": api.DiagServerShapeFallback,
		"message": "shape server not in effect: the upstream refused the provider's compaction (" + why + "); the session falls back to the summarizer bindings"})
	if seq, err := e.opts.Log.Append(context.WithoutCancel(ctx), id, []checkpoint.Event{{Kind: checkpoint.KindDiagnostic, Data: d}}); err == nil {
		s.lastSeq = max(s.lastSeq, seq)
	}
	e.log.Warn("shape server falls back to the summarizer", "session", id, "reason", why)
	return nil
}

// serverSkips reports whether shape server leaves an automatic signal to
// the provider: the provider compacts inside the request once it reaches
// the trigger, so ctxd's own summarizer runs only for a manual or overflow
// compaction, or when the context reaches the window itself (a request the
// provider could not take at all). Called with s.mu held.
func (e *Engine) serverSkips(s *session, sig trigger.Signal, tokens uint64) (string, bool) {
	if !sig.Automatic() || tokens >= s.limit {
		return "", false
	}
	sh := e.serverShape(s)
	if !sh.Active {
		return "", false
	}
	return fmt.Sprintf("%s: shape server: the provider compacts at %d tokens (%d tokens now)", sig, sh.Trigger, tokens), true
}

// recordServerCompaction writes the checkpoint of a provider compaction
// (docs/design.md §10): the newest stored message m is an assistant answer
// holding a compaction block, and shape server is in effect. The
// checkpoint's summary is the block's text (or, for an opaque block, a line
// naming it), its binding BindingServer, and it retains m itself: the
// block goes back to the provider as it came, everything before it leaves
// the assembled context and the estimate. Called with s.mu held, after m
// was applied.
func (e *Engine) recordServerCompaction(ctx context.Context, s *session, m history.Message, tokensBefore uint64) {
	i := history.LastCompaction(m)
	if i < 0 || m.Role != history.RoleAssistant || !e.serverShape(s).Active {
		return
	}
	summary := m.Content[i].Text
	if summary == "" {
		summary = "[the provider's compaction is opaque (encrypted); it goes back to the provider as it came]"
	}
	var summarized uint64
	if s.messages > 0 {
		summarized = s.messages - 1
	}
	cp := checkpoint.Checkpoint{
		Summary:            summary,
		SnapshotSeq:        m.Seq,
		FirstRetainedSeq:   m.Seq,
		SummarizedMessages: summarized,
		Binding:            BindingServer,
		TokensBefore:       tokensBefore,
		Shape:              trigger.ShapeServer,
		Reason:             "auto",
	}
	after := s.fixedTokens + e.est.Message(serverSummaryMessage(cp))
	for _, en := range s.active {
		if en.msg.Seq >= m.Seq {
			after += en.tokens
		}
	}
	cp.TokensAfter = s.calibrate(after)
	stored, err := e.opts.Log.PutCheckpoint(ctx, s.id, cp)
	if err != nil {
		e.log.Warn("recording the provider's compaction", "session", s.id, "err", err)
		return
	}
	s.lastSeq = max(s.lastSeq, stored.Seq)
	s.useCheckpoint(stored)
	e.metrics.Compaction("ok")
}

// ServerSummaryText is the text of the user message that opens a context
// whose latest checkpoint is the provider's compaction (binding
// BindingServer): the provider requires the conversation to begin with a
// user message, and drops everything before the compaction block that
// follows, so this line costs nothing once the provider has the block.
const ServerSummaryText = "[ctxd: the provider compacted the %d earlier messages of this conversation; its summary is the compaction block that follows.]"

func serverSummaryMessage(cp checkpoint.Checkpoint) history.Message {
	return history.Message{
		Role:    history.RoleUser,
		Content: []history.Block{{Type: history.BlockText, Text: fmt.Sprintf(ServerSummaryText, cp.SummarizedMessages)}},
		Time:    cp.Time,
	}
}
