package summarizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ctxd/ctxd/history"
)

// The formats of retained tool content (docs/design.md §5.5).
const (
	// FormatText is a tool result made of exactly one text block, retained
	// as that text's bytes.
	FormatText = "text"
	// FormatToolContentJSON is any other tool result — several blocks,
	// images, json blocks — retained whole as the JSON array of its
	// canonical blocks.
	FormatToolContentJSON = "tool-content-json"
)

// ArtifactReadOmitted replaces the output of an artifact read call in the
// pruned retry: the artifact is already stored, so retaining its read
// output again would only duplicate it.
const ArtifactReadOmitted = "[artifact read output omitted for compaction]"

// ArtifactStore retains content for the pruned retry. The engine adapts
// the artifacts package to it (artifacts.Retain with artifacts.Format and
// ID.URI()).
type ArtifactStore interface {
	// Retain stores content, in format FormatText or
	// FormatToolContentJSON, and returns its "artifact://<id>" URI. It must
	// be safe to call concurrently and return an error rather than a
	// partial URI.
	Retain(ctx context.Context, content []byte, format string) (uri string, err error)
}

// PruneMarker is the text replacing a pruned tool result: its size in
// bytes, its format and where to read it back.
func PruneMarker(size int, format, uri string) string {
	return fmt.Sprintf("[tool result pruned for compaction: %d bytes, format %s; read it with filePath=%q]", size, format, uri)
}

// Prune returns the request of the pruned retry (docs/design.md §5.5): a copy of
// req whose tool results are each retained in store and replaced by a
// PruneMarker, whose artifact read outputs are ArtifactReadOmitted, and
// which has no tool definitions. A result with no content is left as it
// is. Role, tool_call_id, tool_name and is_error of every message are kept;
// messages other than tool results are shared unchanged.
//
// An artifact read output is the result of a call whose tool name is in
// req.ArtifactReadTools (default ["read"]) and whose input's filePath, path
// or file_path starts with "artifact://". Ordinary file reads are pruned
// like any result.
//
// req is never modified. Errors: ErrNoArtifactStore when store is nil and a
// result needs retaining; the store's error, wrapped, otherwise.
func Prune(ctx context.Context, req Request, store ArtifactStore) (Request, PruneStats, error) {
	return prune(ctx, req, store, 0)
}

// pruneTarget is how many tokens the pruned retry after the refusal err
// removes: the excess the refusal named, with a quarter more and
// pruneMarginTokens of margin (the provider's tokens are not o200k_base's,
// and each marker costs some); 0, every result, when it named no figures.
func pruneTarget(err error) uint64 {
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Limit == 0 || pe.Count <= pe.Limit {
		return 0
	}
	excess := pe.Count - pe.Limit
	return excess + excess/4 + pruneMarginTokens
}

// pruneMarginTokens is the pruned retry's margin beyond the excess a
// refusal named, in o200k_base tokens.
const pruneMarginTokens = 1024

// prune is Prune that stops once the results it replaced held target
// o200k_base tokens, oldest first, so the retry keeps the newest tool
// results — the latest progress — whole; target 0 prunes every result.
// Artifact read outputs are replaced in either case (they are stored
// already).
func prune(ctx context.Context, req Request, store ArtifactStore, target uint64) (Request, PruneStats, error) {
	var stats PruneStats
	out := req
	out.Tools = nil
	out.Messages = make([]history.Message, len(req.Messages))
	copy(out.Messages, req.Messages)
	var removed uint64

	calls := map[string]history.Block{}
	readTools := req.artifactReadTools()
	for i := range out.Messages {
		m := &out.Messages[i]
		if m.Role == history.RoleAssistant {
			for _, c := range m.ToolCalls() {
				calls[c.ID] = c
			}
			continue
		}
		if m.Role != history.RoleTool || len(m.Content) == 0 {
			continue
		}
		call, ok := calls[m.ToolCallID]
		name := m.ToolName
		if ok && call.Name != "" {
			name = call.Name
		}
		if slices.ContainsFunc(readTools, func(t string) bool { return strings.EqualFold(t, name) }) && readsArtifact(call.Input) {
			m.Content = []history.Block{{Type: history.BlockText, Text: ArtifactReadOmitted}}
			stats.ArtifactReads++
			continue
		}
		if target > 0 && removed >= target {
			stats.Kept++
			continue
		}
		content, format, err := toolContent(m.Content)
		if err != nil {
			return Request{}, stats, fmt.Errorf("encoding tool result %q: %w", m.ToolCallID, err)
		}
		if store == nil {
			return Request{}, stats, ErrNoArtifactStore
		}
		uri, err := store.Retain(ctx, content, format)
		if err != nil {
			return Request{}, stats, fmt.Errorf("retaining tool result %q (%d bytes): %w", m.ToolCallID, len(content), err)
		}
		if target > 0 {
			removed += history.Estimator{}.Message(*m)
		}
		m.Content = []history.Block{{Type: history.BlockText, Text: PruneMarker(len(content), format, uri)}}
		stats.Results++
		stats.Bytes += uint64(len(content))
	}
	return out, stats, nil
}

// toolContent serializes a tool result's content for retaining: the text of
// a lone text block, else the JSON of all its blocks.
func toolContent(blocks []history.Block) ([]byte, string, error) {
	if len(blocks) == 1 && blocks[0].Type == history.BlockText {
		return []byte(blocks[0].Text), FormatText, nil
	}
	b, err := json.Marshal(blocks)
	return b, FormatToolContentJSON, err
}

// readsArtifact reports whether a call's input names an artifact:// path
// under filePath, path or file_path.
func readsArtifact(input json.RawMessage) bool {
	if len(input) == 0 {
		return false
	}
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return false
	}
	for _, k := range []string{"filePath", "path", "file_path"} {
		if s, ok := in[k].(string); ok && strings.HasPrefix(s, "artifact://") {
			return true
		}
	}
	return false
}
