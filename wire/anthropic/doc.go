// Package anthropic is the one home of the Anthropic Messages wire format
// (docs/design.md §4): its types, parse (wire → canonical history.Message,
// docs/design.md §2), render (canonical → wire, §4), the reading of a response
// (a JSON body or a server-sent event stream, rebuilt into the assistant
// message and its usage) and the classification of the provider's errors.
// Transcript import, the summarizer, the daemon's ?format=anthropic and the
// provider proxy (§10) all use it; none keeps a copy of the format.
package anthropic
