package openai

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"

	"github.com/zeebo/xxh3"
)

// Client-bytes reuse (docs/proxy.md, "The OpenAI APIs", client bytes): an
// item ctxd has not rewritten goes upstream as the client's own bytes. The
// proxy indexes the client's items by ItemKey of their rendering alone and
// looks its outgoing items up by the same key.

// ItemKey is the key by which an outgoing item is matched to a client
// item: a fast keyed hash of its bytes (xxh3, 128 bits, with the caller's
// per-process seed; every outgoing item is hashed on every request, and
// SHA-256 of a 1 MB conversation costs a millisecond). A reasoning or
// compaction item, which ctxd sends back as recorded from the answer's
// stream while the client resends its own encoding of it (Codex adds
// "content":null), is hashed as its members without the null ones, in key
// order, compact: the client's re-encoding of the item ctxd recorded is
// matched, and goes upstream as the client's bytes.
func ItemKey(raw json.RawMessage, seed uint64) [sha256.Size]byte {
	var d [sha256.Size]byte
	if bytes.Contains(raw, []byte(`"reasoning"`)) || bytes.Contains(raw, []byte(`"compaction"`)) {
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil && (m["type"] == "reasoning" || m["type"] == "compaction") {
			for k, v := range m {
				if v == nil {
					delete(m, k)
				}
			}
			if b, err := json.Marshal(m); err == nil {
				raw, d[16] = b, 1
			}
		}
	}
	h := xxh3.Hash128Seed(raw, seed).Bytes()
	copy(d[:16], h[:])
	return d
}
