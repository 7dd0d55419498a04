package config

import "slices"

// ServerShapeModels splits the configured models (the catalog and the
// [models] tables) for compaction.shape "server" (docs/design.md §10): those
// whose provider compacts server-side (server_compaction), and those that
// fall back to the summarizer bindings. Both are sorted by id.
func (c Config) ServerShapeModels() (compacting, fallback []string) {
	for id, m := range c.Models {
		if m.ServerCompaction {
			compacting = append(compacting, id)
		} else {
			fallback = append(fallback, id)
		}
	}
	slices.Sort(compacting)
	slices.Sort(fallback)
	return compacting, fallback
}

// ServerShapeRule says in one line where shape "server" uses the
// provider's compaction and where it falls back (docs/design.md §10).
const ServerShapeRule = `the provider compacts proxied Anthropic Messages and OpenAI Responses sessions of models with server_compaction (while their upstream accepts it); Chat Completions sessions, sessions of the daemon API, other models and upstreams that refuse it fall back to the summarizer bindings`
