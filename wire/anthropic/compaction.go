package anthropic

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/internal/rawjson"
	"github.com/ctxd/ctxd/wire"
)

// The provider's own compaction (docs/design.md §10, shape "server"): the
// context_management edit
// {"type":"compact_20260112","trigger":{"type":"input_tokens","value":N}},
// as in the corpus's recorded request, under the anthropic-beta
// compact-2026-01-12; N is the session's threshold, which must be at least
// the API's minimum trigger of 50,000 tokens. The client's own
// context_management is kept: the edit is added to its edits unless it
// has a compaction edit of its own.
const (
	CompactEdit = "compact_20260112"
	CompactBeta = "compact-2026-01-12"
	// CompactMin is the smallest trigger Anthropic accepts, in tokens.
	CompactMin = 50000
)

func (Dialect) ServerCompaction() bool { return true }

// WithServerCompaction adds the compaction edit to body, to fire at
// trigger tokens; a trigger below CompactMin is a *wire.BelowMinimumError.
func (Dialect) WithServerCompaction(body []byte, trigger uint64) ([]byte, string, error) {
	if trigger < CompactMin {
		return nil, "", &wire.BelowMinimumError{Provider: "Anthropic", Trigger: trigger, Minimum: CompactMin}
	}
	edit := fmt.Sprintf(`{"type":%q,"trigger":{"type":"input_tokens","value":%d}}`, CompactEdit, trigger)
	out, err := withEdit(body, edit)
	return out, CompactBeta, err
}

// IsServerCompactionRefusal: a 400 or 422 whose message names the
// context_management parameter, the edit or the beta.
func (d Dialect) IsServerCompactionRefusal(status int, body []byte) (string, bool) {
	msg, ok := d.ErrorMessage(body)
	if !ok {
		msg = string(body)
	}
	return wire.RefusalNaming(status, msg, "context_management", CompactEdit, CompactBeta, "compact_threshold")
}

// withEdit adds edit to the body's context_management.edits (creating the
// member when the client sent none); a client edit of the same type is
// kept instead.
func withEdit(body []byte, edit string) ([]byte, error) {
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
		if wire.TypeOf(e) == CompactEdit {
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
