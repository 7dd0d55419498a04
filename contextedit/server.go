package contextedit

import (
	"encoding/json"
	"fmt"

	"github.com/ctxd/ctxd/config"
)

// ServerEditType is the Anthropic context-management edit that clears old
// tool results server-side, the provider's equivalent of a local pass.
const ServerEditType = "clear_tool_uses_20250919"

// CharsPerToken converts the character limits of [context_editing] to the
// token values of the server edit: tokens = ceil(chars / CharsPerToken).
// Tool output (code, logs, JSON) runs about 3 characters per o200k token —
// docs/design.md §2 measures chars/4 undercounting logs by ~40 % and JSON by
// ~28 % — and the Anthropic tokenizer counts more tokens still, so 3 keeps
// the server's trigger and clear_at_least at or below the local ones: the
// server clears no later than a local pass would.
const CharsPerToken = 3

type serverParam struct {
	Edits []serverEdit `json:"edits"`
}

type serverEdit struct {
	Type         string   `json:"type"`
	Trigger      quantity `json:"trigger"`
	Keep         quantity `json:"keep"`
	ClearAtLeast quantity `json:"clear_at_least"`
	ExcludeTools []string `json:"exclude_tools,omitempty"`
	// ClearToolInputs: the server also clears the cleared calls' inputs
	// (the edit's clear_tool_inputs, false when omitted).
	ClearToolInputs bool `json:"clear_tool_inputs,omitempty"`
}

type quantity struct {
	Type  string `json:"type"`
	Value uint64 `json:"value"`
}

// ServerEdit returns the Anthropic context_management request parameter
// equivalent to cfg, for mode "server" (docs/design.md §6):
//
//	{"edits":[{"type":"clear_tool_uses_20250919",
//	  "trigger":{"type":"input_tokens","value":N},
//	  "keep":{"type":"tool_uses","value":K},
//	  "clear_at_least":{"type":"input_tokens","value":M},
//	  "exclude_tools":[...],"clear_tool_inputs":true}]}
//
// N is max_total_tool_result_chars and M min_chars_per_pass, converted with
// CharsPerToken; note the server's trigger counts the whole input, not only
// tool results. K is keep_recent_turns, kept as a count of tool uses (the
// server's unit; a turn may hold several). exclude_tools is
// protect_tool_names, omitted when empty. min_chars_to_elide has no server
// equivalent. clear_tool_inputs is context_editing.clear_tool_inputs
// (omitted when false, the API's default). It returns nil when cfg.Enabled is false. The bytes are the
// same for the same cfg.
func ServerEdit(cfg config.ContextEditing) json.RawMessage {
	if !cfg.Enabled {
		return nil
	}
	p := serverParam{Edits: []serverEdit{{
		Type:            ServerEditType,
		Trigger:         quantity{"input_tokens", charsToTokens(cfg.MaxTotalToolResultChars)},
		Keep:            quantity{"tool_uses", cfg.KeepRecentTurns},
		ClearAtLeast:    quantity{"input_tokens", charsToTokens(cfg.MinCharsPerPass)},
		ExcludeTools:    cfg.ProtectToolNames,
		ClearToolInputs: cfg.ClearToolInputs,
	}}}
	b, err := json.Marshal(p)
	if err != nil {
		panic("contextedit: marshal server edit: " + err.Error()) // strings and integers always marshal
	}
	return b
}

func charsToTokens(chars uint64) uint64 {
	return (chars + CharsPerToken - 1) / CharsPerToken
}

// Modes in effect, as Mode reports them.
const (
	ModeOff    = "off"
	ModeLocal  = config.EditModeLocal
	ModeServer = config.EditModeServer
)

// Mode returns the context-editing mode in effect for a model and why, for
// ctxctl doctor (docs/design.md §6): "off" when cfg.Enabled is false or the mode
// is unknown; "local" and "server" as configured ("server" on a model whose
// catalog entry lacks server_context_editing is kept, with a warning in
// why); "auto" gives "server" when serverSupported (the model's
// server_context_editing), else "local".
func Mode(cfg config.ContextEditing, serverSupported bool) (mode string, why string) {
	if !cfg.Enabled {
		return ModeOff, "context_editing.enabled is false"
	}
	switch cfg.Mode {
	case config.EditModeLocal:
		return ModeLocal, `context_editing.mode is "local": ctxd elides old tool results itself`
	case config.EditModeServer:
		if !serverSupported {
			return ModeServer, `context_editing.mode is "server", but the model does not list server_context_editing: the provider may reject or ignore the edit, and ctxd makes no local edits`
		}
		return ModeServer, `context_editing.mode is "server": the provider clears old tool results`
	case config.EditModeAuto:
		if serverSupported {
			return ModeServer, `context_editing.mode is "auto" and the model supports server context editing`
		}
		return ModeLocal, `context_editing.mode is "auto" and the model does not support server context editing`
	}
	return ModeOff, fmt.Sprintf("context_editing.mode %q is not local, server or auto", cfg.Mode)
}
