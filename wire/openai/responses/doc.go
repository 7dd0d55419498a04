// Package responses is the one home of the Responses wire format (POST
// /v1/responses, Codex CLI's only API): its items converted to the
// canonical model (docs/design.md §2) and back, Codex rollouts' recorded
// items, its request, its answers whole and streamed, the provider's own
// compaction, and its wire.Dialect (Dialect).
package responses
