package api

import "strings"

// HeaderDiagnostic carries a diagnostic, in words, on an answer whose body
// has no place for it: the provider formats of GET …/context (the
// pre-send compaction failed and the context is the uncompacted one) and
// the provider proxy's answers (docs/proxy.md). Its value is HeaderValue's.
const HeaderDiagnostic = "Ctxd-Diagnostic"

// headerASCII spells in ASCII the non-ASCII characters ctxd's diagnostics
// use ("docs/design.md §4a" becomes "docs/design.md section 4a").
var headerASCII = strings.NewReplacer("§", "section ", "≥", ">=", "≤", "<=", "…", "...", "—", "-", "–", "-", "→", "->")

// HeaderValue makes s one ASCII header line: header values are bytes that
// clients read as Latin-1, so "§" would arrive as "Â§"; control characters
// become spaces, and the characters headerASCII does not know '?'.
func HeaderValue(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r < 0x20 || r == 0x7f:
			return ' '
		case r > 0x7f:
			return '?'
		}
		return r
	}, headerASCII.Replace(s))
}
