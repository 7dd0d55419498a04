package summarizer

import (
	"encoding/json"
	"path"
	"regexp"
	"sort"
	"strings"
)

// What an edit changed, read from the tool call's input: Claude Code's Edit,
// Write and MultiEdit (file_path, old_string/new_string, content, edits), pi's
// edit and write (path, oldText/newText, content), SWE-agent's and Anthropic's
// editors (path, old_str/new_str, file_text; search/replace), and Codex
// apply_patch (a patch text in input, patch or cmd). The summary names the
// definitions an edit added or removed, so an agent continuing from it knows
// the names it wrote (docs/decisions.md "What the extractive summary keeps").

// exEdit is one file change parsed from a tool call's input.
type exEdit struct {
	path    string // as written in the input; "" when the input names none
	oldText string // the text replaced ("" for a new file)
	newText string // the text written
	created bool   // a whole file written (Write, create, Add File)
}

// exIdentDefs match the definition sites of the languages agents commonly
// write. Group 1 is the name.
var exIdentDefs = []*regexp.Regexp{
	// Go: func Name(, func (r *T) Name(, and top-level type, const, var
	// (top level only: an indented "const x" is a JavaScript local).
	regexp.MustCompile(`(?m)^func\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)\s*[\[(]`),
	regexp.MustCompile(`(?m)^(?:type|const|var)\s+([A-Za-z_]\w*)\b`),
	// A top-level dotted assignment of an object or function
	// (Hooks.TranscriptHighlighter = {).
	regexp.MustCompile(`(?m)^([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+)\s*=\s*(?:\{|\(|function)`),
	// JS/TS: function, class, interface, enum, type alias, exported const
	regexp.MustCompile(`(?m)^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)`),
	regexp.MustCompile(`(?m)^\s*(?:export\s+)?(?:default\s+)?(?:abstract\s+)?(?:class|interface|enum|struct|trait|protocol|record)\s+([A-Za-z_$][\w$]*)`),
	regexp.MustCompile(`(?m)^\s*(?:export\s+)?type\s+([A-Za-z_$][\w$]*)\s*(?:<[^=]*>)?\s*=`),
	regexp.MustCompile(`(?m)^\s*export\s+(?:const|let|var)\s+([A-Za-z_$][\w$]*)`),
	// Methods in a class body: "  name(args) {" or "  async name(…): T {"
	regexp.MustCompile(`(?m)^\s{2,}(?:(?:public|private|protected|static|async|override|readonly|get|set)\s+)*([A-Za-z_$][\w$]*)\s*\([^)\n]*\)\s*(?::\s*[^{\n]+)?\{\s*$`),
	// Python, Ruby, Elixir, Rust, Kotlin, Swift …
	regexp.MustCompile(`(?m)^\s*(?:async\s+)?(?:def|defp|defmacro|defmacrop|defguard|fn|fun|func|pub\s+fn|pub\s+async\s+fn|pub\(crate\)\s+fn)\s+([A-Za-z_]\w*[?!]?)`),
	regexp.MustCompile(`(?m)^\s*(?:defmodule|defprotocol|defimpl)\s+([A-Z][\w.]*)`),
	regexp.MustCompile(`(?m)^\s*alias\s+([A-Z][\w.]*)`),
	regexp.MustCompile(`(?m)^\s*(?:pub\s+)?(?:struct|enum|trait|impl|mod|type)\s+([A-Za-z_]\w*)`),
	// Elixir module attributes and Spark-style DSL entities (computer :name).
	regexp.MustCompile(`(?m)^\s*(@[a-z_]\w*)\s+\S`),
	regexp.MustCompile(`(?m)^\s*(?:computer|input|val|event|attribute|action|field|schema|embeds_one|embeds_many|has_many|belongs_to)\s+:([a-z_]\w*)`),
	// C-family constants and #define
	regexp.MustCompile(`(?m)^\s*#define\s+([A-Za-z_]\w*)`),
	// Configuration keys named in code: struct tags (toml:"max_bytes").
	regexp.MustCompile("(?:toml|yaml|mapstructure|env|koanf):\"([A-Za-z0-9_.-]+)[,\"]"),
}

// exConfigKey matches a key in a TOML, YAML, INI or .env file.
var exConfigKey = regexp.MustCompile(`(?m)^\s*(?:\[\[?([A-Za-z0-9_."-]+)\]\]?|([A-Za-z_][\w.-]*)\s*[=:])`)

// exLangDefs are the definition patterns of a file's language, by
// extension (indexes into exIdentDefs); a file of another kind (Markdown
// with code blocks, an unknown extension) is read with all of them.
var exLangDefs = func() map[string][]*regexp.Regexp {
	pick := func(idx ...int) []*regexp.Regexp {
		out := make([]*regexp.Regexp, len(idx))
		for i, k := range idx {
			out[i] = exIdentDefs[k]
		}
		return out
	}
	jsLike := pick(2, 3, 4, 5, 6, 7, 8)
	m := map[string][]*regexp.Regexp{
		".go": pick(0, 1, 15),
		".py": pick(4, 8), ".rb": pick(4, 8),
		".ex": pick(8, 9, 10, 12, 13), ".exs": pick(8, 9, 10, 12, 13),
		".rs": pick(8, 11),
		".c":  pick(4, 14), ".h": pick(4, 14), ".cc": pick(4, 14), ".cpp": pick(4, 14), ".hpp": pick(4, 14),
	}
	for _, e := range []string{".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".java", ".cs", ".kt", ".swift", ".dart", ".scala", ".php"} {
		m[e] = jsLike
	}
	return m
}()

// exJSONKey matches a key of a JSON object written one per line.
var exJSONKey = regexp.MustCompile(`(?m)^\s*"([A-Za-z_][\w.-]*)"\s*:`)

// exIdentStop are names the patterns catch that say nothing.
var exIdentStop = map[string]bool{
	"if": true, "for": true, "while": true, "switch": true, "catch": true, "return": true,
	"function": true, "constructor": true, "main": true, "init": true, "new": true, "else": true,
	"do": true, "end": true, "true": true, "false": true, "nil": true, "null": true,
	"@doc": true, "@moduledoc": true, "@spec": true, "@impl": true, "@type": true, "@typedoc": true,
	"@behaviour": true, "@callback": true, "@derive": true, "@dialyzer": true, "@tag": true,
}

// exConfigExts are file extensions whose keys are the identifiers.
var exConfigExts = map[string]bool{".toml": true, ".yaml": true, ".yml": true, ".ini": true, ".env": true, ".cfg": true, ".conf": true}

// identifiers returns the names defined in text, in order of appearance,
// each once. p (a file path) selects config-key parsing for config files.
func identifiers(p, text string) []string {
	if text == "" {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	add := func(name string) {
		name = strings.TrimSuffix(name, ".")
		if name == "" || len(name) < 2 || len(name) > 80 || exIdentStop[name] || seen[name] {
			return
		}
		seen[name] = true
		out = append(out, name)
	}
	ext := strings.ToLower(path.Ext(p))
	if ext == ".json" {
		for _, m := range exJSONKey.FindAllStringSubmatch(text, -1) {
			add(m[1])
		}
		return out
	}
	if exConfigExts[ext] || strings.HasPrefix(path.Base(p), ".env") {
		for _, m := range exConfigKey.FindAllStringSubmatch(text, -1) {
			if m[1] != "" {
				add("[" + m[1] + "]")
			} else {
				add(m[2])
			}
		}
		return out
	}
	type hit struct {
		at   int
		name string
	}
	var hits []hit
	defs := exIdentDefs
	if set, ok := exLangDefs[ext]; ok {
		defs = set
	}
	for _, re := range defs {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			hits = append(hits, hit{m[2], text[m[2]:m[3]]})
		}
	}
	// Order of appearance in the text, whichever pattern found it.
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
	for _, h := range hits {
		add(h.name)
	}
	return out
}

// editsOf returns the file changes a tool call's input describes, or nil
// when it describes none.
func editsOf(name string, in map[string]any) []exEdit {
	str := func(keys ...string) string {
		for _, k := range keys {
			if s, ok := in[k].(string); ok && s != "" {
				return s
			}
		}
		return ""
	}
	p := str(exFileKeys...)
	lname := strings.ToLower(name)
	// Codex apply_patch: the patch in "input" (custom tool, normalized
	// string input), "patch", or a shell command running apply_patch.
	if patch := str("patch"); patch != "" || lname == "apply_patch" || strings.Contains(str("input"), "*** Begin Patch") ||
		strings.Contains(commandText(in), "*** Begin Patch") {
		if patch == "" {
			patch = str("input")
		}
		if patch == "" || !strings.Contains(patch, "*** ") {
			patch = commandText(in)
		}
		return parsePatch(patch)
	}
	if edits, ok := in["edits"].([]any); ok { // MultiEdit, pi's multi-edit
		var out []exEdit
		for _, e := range edits {
			m, _ := e.(map[string]any)
			if m == nil {
				continue
			}
			o, _ := firstString(m, "old_string", "oldText", "old_str", "old")
			n, _ := firstString(m, "new_string", "newText", "new_str", "new")
			out = append(out, exEdit{path: p, oldText: o, newText: n})
		}
		return out
	}
	if n, ok := firstString(in, "new_string", "newText", "new_str", "replace", "replacement", "new"); ok {
		o, _ := firstString(in, "old_string", "oldText", "old_str", "search", "old")
		return []exEdit{{path: p, oldText: o, newText: n}}
	}
	if c, ok := firstString(in, "content", "file_text", "contents"); ok && (p != "" || toolOp(name) == "write") {
		return []exEdit{{path: p, newText: c, created: true}}
	}
	// SWE-agent's edit/insert with "text" and the open file.
	if t, ok := firstString(in, "text", "new_text"); ok && toolOp(name) == "write" {
		return []exEdit{{path: p, newText: t}}
	}
	return nil
}

// firstString returns the first string value of m under one of keys.
func firstString(m map[string]any, keys ...string) (string, bool) {
	for _, k := range keys {
		if s, ok := m[k].(string); ok {
			return s, true
		}
	}
	return "", false
}

// exCodeModeCmdRe finds the shell command in Codex code-mode input
// (tools.exec_command({cmd: "…"})).
var exCodeModeCmdRe = regexp.MustCompile(`exec_command\(\{\s*cmd:\s*("(?:[^"\\]|\\.)*")`)

// commandText is the raw command of a tool input (not cut to one line).
func commandText(in map[string]any) string {
	if code, ok := in["input"].(string); ok && strings.Contains(code, "exec_command(") {
		if m := exCodeModeCmdRe.FindStringSubmatch(code); m != nil {
			var cmd string
			if json.Unmarshal([]byte(m[1]), &cmd) == nil {
				return cmd
			}
		}
	}
	for _, k := range []string{"command", "cmd"} {
		switch v := in[k].(type) {
		case string:
			return v
		case []any:
			var parts []string
			for _, p := range v {
				if s, ok := p.(string); ok {
					parts = append(parts, s)
				}
			}
			return strings.Join(parts, " ")
		}
	}
	return ""
}

// parsePatch reads a Codex apply_patch text ("*** Update File: p",
// "*** Add File: p", "*** Delete File: p", "-"/"+" lines) into edits.
func parsePatch(patch string) []exEdit {
	var out []exEdit
	var cur *exEdit
	var oldB, newB strings.Builder
	flush := func() {
		if cur != nil {
			cur.oldText, cur.newText = oldB.String(), newB.String()
			out = append(out, *cur)
		}
		cur = nil
		oldB.Reset()
		newB.Reset()
	}
	for _, l := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(l, "*** Update File: "):
			flush()
			cur = &exEdit{path: strings.TrimSpace(strings.TrimPrefix(l, "*** Update File: "))}
		case strings.HasPrefix(l, "*** Add File: "):
			flush()
			cur = &exEdit{path: strings.TrimSpace(strings.TrimPrefix(l, "*** Add File: ")), created: true}
		case strings.HasPrefix(l, "*** Delete File: "):
			flush()
			out = append(out, exEdit{path: strings.TrimSpace(strings.TrimPrefix(l, "*** Delete File: "))})
		case strings.HasPrefix(l, "*** Move to: "):
			if cur != nil {
				cur.path = strings.TrimSpace(strings.TrimPrefix(l, "*** Move to: "))
			}
		case cur == nil:
		case strings.HasPrefix(l, "+"):
			newB.WriteString(l[1:] + "\n")
		case strings.HasPrefix(l, "-"):
			oldB.WriteString(l[1:] + "\n")
		}
	}
	flush()
	return out
}

// identDelta returns the names an edit adds (defined in its new text and
// not in its old text), removes (the reverse) and changes (defined in both
// texts of an edit that replaced something), in order of appearance.
func identDelta(e exEdit) (added, removed, changed []string) {
	return identDeltaWith(identifiers, e)
}

// identCache memoizes identifiers within one summary: a rewritten file's
// old text is the previous write's new text.
type identCache map[[2]string][]string

func (c identCache) identifiers(p, text string) []string {
	k := [2]string{p, text}
	if ids, ok := c[k]; ok {
		return ids
	}
	ids := identifiers(p, text)
	c[k] = ids
	return ids
}

// identDeltaWith is identDelta with the identifier function given.
func identDeltaWith(idents func(p, text string) []string, e exEdit) (added, removed, changed []string) {
	oldIDs := idents(e.path, e.oldText)
	newIDs := idents(e.path, e.newText)
	inOld := map[string]bool{}
	for _, n := range oldIDs {
		inOld[n] = true
	}
	inNew := map[string]bool{}
	for _, n := range newIDs {
		inNew[n] = true
		if !inOld[n] {
			added = append(added, n)
		} else if e.oldText != e.newText && !e.created {
			changed = append(changed, n)
		}
	}
	for _, n := range oldIDs {
		if !inNew[n] {
			removed = append(removed, n)
		}
	}
	return added, removed, changed
}
