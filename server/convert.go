package server

// Conversions between the wire types of package api and the domain types of
// history, checkpoint and engine: the only place that knows both shapes.
// The message types match field for field (api's parity test keeps them in
// step), so the conversions copy.

import (
	"github.com/ctxd/ctxd/api"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
)

func toHistoryBlocks(in []api.Block) []history.Block {
	if in == nil {
		return nil
	}
	out := make([]history.Block, len(in))
	for i, b := range in {
		out[i] = history.Block{
			Type:      history.BlockType(b.Type),
			Text:      b.Text,
			Signature: b.Signature,
			Data:      b.Data,
			ID:        b.ID,
			Name:      b.Name,
			Input:     b.Input,
			MediaType: b.MediaType,
			Artifact:  b.Artifact,
			JSON:      b.JSON,
		}
	}
	return out
}

func toAPIBlocks(in []history.Block) []api.Block {
	out := make([]api.Block, len(in))
	for i, b := range in {
		out[i] = api.Block{
			Type:      api.BlockType(b.Type),
			Text:      b.Text,
			Signature: b.Signature,
			Data:      b.Data,
			ID:        b.ID,
			Name:      b.Name,
			Input:     b.Input,
			MediaType: b.MediaType,
			Artifact:  b.Artifact,
			JSON:      b.JSON,
		}
	}
	return out
}

// toHistoryMessages converts appended messages. Seq and Tokens are the
// server's to set and are not taken from the request.
func toHistoryMessages(in []api.Message) []history.Message {
	out := make([]history.Message, len(in))
	for i, m := range in {
		hm := history.Message{
			Role:       history.Role(m.Role),
			Content:    toHistoryBlocks(m.Content),
			ToolCallID: m.ToolCallID,
			ToolName:   m.ToolName,
			IsError:    m.IsError,
			Time:       m.Time,
			Model:      m.Model,
		}
		if m.Usage != nil {
			u := history.Usage(*m.Usage)
			hm.Usage = &u
		}
		out[i] = hm
	}
	return out
}

func toAPIMessage(m history.Message) api.Message {
	am := api.Message{
		Seq:        m.Seq,
		Role:       api.Role(m.Role),
		Content:    toAPIBlocks(m.Content),
		ToolCallID: m.ToolCallID,
		ToolName:   m.ToolName,
		IsError:    m.IsError,
		Time:       m.Time,
		Model:      m.Model,
		Tokens:     m.Tokens,
	}
	if m.Usage != nil {
		u := api.Usage(*m.Usage)
		am.Usage = &u
	}
	return am
}

func toAPIMessages(in []history.Message) []api.Message {
	out := make([]api.Message, len(in))
	for i, m := range in {
		out[i] = toAPIMessage(m)
	}
	return out
}

func toHistoryTools(in []api.ToolDef) []history.ToolDef {
	if in == nil {
		return nil
	}
	out := make([]history.ToolDef, len(in))
	for i, t := range in {
		out[i] = history.ToolDef(t)
	}
	return out
}

func toAPITools(in []history.ToolDef) []api.ToolDef {
	if len(in) == 0 {
		return nil
	}
	out := make([]api.ToolDef, len(in))
	for i, t := range in {
		out[i] = api.ToolDef(t)
	}
	return out
}

func toCreateParams(req api.CreateSessionRequest) engine.CreateParams {
	return engine.CreateParams{
		ID:           req.ID,
		Model:        req.Model,
		ContextLimit: req.ContextLimit,
		System:       req.System,
		Tools:        toHistoryTools(req.Tools),
		Pinned:       toHistoryBlocks(req.Pinned),
		Overlay:      req.Config,
		Labels:       req.Labels,
	}
}

func toPatch(req api.PatchSessionRequest) engine.Patch {
	p := engine.Patch{
		System:       req.System,
		Model:        req.Model,
		ContextLimit: req.ContextLimit,
	}
	if req.Tools != nil {
		t := toHistoryTools(*req.Tools)
		if t == nil {
			t = []history.ToolDef{}
		}
		p.Tools = &t
	}
	if req.Pinned != nil {
		b := toHistoryBlocks(*req.Pinned)
		if b == nil {
			b = []history.Block{}
		}
		p.Pinned = &b
	}
	return p
}

func toAPICheckpoint(cp checkpoint.Checkpoint) api.Checkpoint {
	out := api.Checkpoint{
		Seq:                cp.Seq,
		Time:               cp.Time,
		Summary:            cp.Summary,
		SummaryBytes:       cp.SummaryBytes,
		Stalled:            cp.Stalled,
		SnapshotSeq:        cp.SnapshotSeq,
		FirstRetainedSeq:   cp.FirstRetainedSeq,
		SummarizedMessages: cp.SummarizedMessages,
		Binding:            cp.Binding,
		PrunedRetry:        cp.PrunedRetry,
		TokensBefore:       cp.TokensBefore,
		TokensAfter:        cp.TokensAfter,
		Shape:              cp.Shape,
		Reason:             cp.Reason,
		Fallback:           cp.Fallback,
	}
	if cp.Request != nil {
		out.RequestSeq = cp.Request.Seq
	}
	if cp.FirstRequest != nil {
		out.FirstRequestSeq = cp.FirstRequest.Seq
	}
	return out
}

// toAPISession describes a session. A light entry of a listing (a session
// not in memory) has no token figure, circuit or last check.
func toAPISession(in engine.Info) api.Session {
	s := api.Session{
		ID:                in.ID,
		Model:             in.Model,
		ContextLimit:      in.ContextLimit,
		WindowSource:      in.WindowSource,
		SettingsDiff:      in.SettingsDiff,
		PrepareMark:       in.PrepareMark,
		IdleCompaction:    in.IdleCompaction,
		Threshold:         in.Threshold,
		Auto:              in.Auto,
		Created:           in.Created,
		Updated:           in.Updated,
		Messages:          in.Messages,
		LastSeq:           in.LastSeq,
		Tokens:            api.Tokens{Value: in.Tokens, Source: in.TokensSource},
		Circuit:           api.Circuit{Open: in.CircuitOpen, Failures: in.Failures},
		Compaction:        in.Compaction,
		OpenToolCalls:     in.OpenToolCalls,
		Checkpoints:       in.Checkpoints,
		Shape:             in.Shape,
		ContextEditing:    in.ContextEditMode,
		ContextEditingWhy: in.ContextEditWhy,
		ServerShapeActive: in.ServerShape != nil && in.ServerShape.Active,
		ServerShapeWhy:    serverShapeWhy(in.ServerShape),
		SystemDigest:      in.SystemDigest,
		ToolsDigest:       in.ToolsDigest,
		Labels:            in.Labels,
		LastError:         in.LastError,
		Warnings:          in.Warnings,
	}
	if s.Compaction == "" {
		s.Compaction = api.CompactionIdle
	}
	s.Mode, s.Ledger = in.Mode, toAPILedgerSummary(in.Ledger)
	if r := in.Rewrites; r != nil {
		s.Rewrites = &api.RewriteFigures{Passes: r.Passes, Compactions: r.Compactions, RewrittenTokens: r.RewrittenTokens,
			SavedTokens: r.SavedTokens, Cost: r.Cost, Savings: r.Savings, Net: r.Net,
			DeferredPasses: r.DeferredPasses, DeferredCost: r.DeferredCost, DeferredSavings: r.DeferredSavings}
	}
	if in.Checkpoint != nil {
		cp := toAPICheckpoint(*in.Checkpoint)
		cp.Summary = ""
		s.LastCheckpoint = &cp
	}
	if c := in.LastCheck; c != nil {
		s.LastCheck = &api.TriggerCheck{Time: c.Time, Signal: string(c.Signal), Tokens: api.Tokens{Value: c.Tokens, Source: c.Source},
			Threshold: c.Threshold, Fired: c.Fired, Reason: c.Reason}
	}
	return s
}

func toAPIEvent(ev checkpoint.Event) api.Event {
	out := api.Event{
		Seq:  ev.Seq,
		Kind: api.EventKind(ev.Kind),
		Time: ev.Time,
		Data: ev.Data,
	}
	if ev.Message != nil {
		m := toAPIMessage(*ev.Message)
		out.Message = &m
	}
	return out
}

func toContextResponse(a *engine.Assembled) api.ContextResponse {
	r := api.ContextResponse{
		System:        a.System,
		Tools:         toAPITools(a.Tools),
		Messages:      toAPIMessages(a.Messages),
		Tokens:        api.Tokens{Value: a.Tokens, Source: a.TokensSource},
		Threshold:     a.Threshold,
		ContextLimit:  a.ContextLimit,
		CheckpointSeq: a.CheckpointSeq,
		LastSeq:       a.LastSeq,
	}
	if a.Diagnostic != "" {
		code := a.DiagnosticCode
		if code == "" {
			code = api.DiagCompactionFailed
		}
		level := api.DiagLevelWarn
		if code == api.DiagNothingToCompact || code == api.DiagSummaryPreparing {
			level = api.DiagLevelInfo // an answer, not a failure (docs/design.md §5.2)
		}
		r.Diagnostic = &api.Diagnostic{Level: level, Code: code, Message: a.Diagnostic}
	}
	return r
}

// serverShapeWhy is the session's shape-server explanation, "" when the
// shape is not "server".
func serverShapeWhy(sh *engine.ServerShape) string {
	if sh == nil {
		return ""
	}
	return sh.Why
}
