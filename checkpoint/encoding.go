package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/history"
)

// Key layout (DESIGN.md §8). Session ids never contain '/', so one
// session's keys are contiguous and no other session's key starts with its
// prefix.
//
//	s/<session>/meta        Meta
//	s/<session>/e/<seq>     Event, seq 8-byte big-endian
//	s/<session>/c/<seq>     Checkpoint, seq of its event
func sessionPrefix(session string) []byte { return []byte("s/" + session + "/") }

func metaKey(session string) []byte { return []byte("s/" + session + "/meta") }

func eventPrefix(session string) []byte { return []byte("s/" + session + "/e/") }

func cpPrefix(session string) []byte { return []byte("s/" + session + "/c/") }

func seqKey(prefix []byte, seq uint64) []byte {
	k := make([]byte, len(prefix)+8)
	copy(k, prefix)
	binary.BigEndian.PutUint64(k[len(prefix):], seq)
	return k
}

func keySeq(prefix, key []byte) (uint64, bool) {
	if len(key) != len(prefix)+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[len(prefix):]), true
}

// Every value starts with a format byte so that the encoding can change
// without rewriting the log.
const formatV1 = 1

// eventHeader is the JSON part of an encoded event. Seq lives in the key.
type eventHeader struct {
	Kind    Kind             `json:"kind"`
	Time    time.Time        `json:"time"`
	Message *history.Message `json:"message,omitempty"`
}

// encodeEvent encodes e as: format byte, uvarint length of the header, the
// header's JSON, then Data verbatim. Data is kept out of the JSON envelope
// because encoding/json would compact and HTML-escape it; this way it comes
// back byte for byte. The message is encoded with encoding/json, so it comes
// back equal and re-encodes to the same bytes.
func encodeEvent(e *Event) ([]byte, error) {
	h, err := json.Marshal(eventHeader{Kind: e.Kind, Time: e.Time, Message: e.Message})
	if err != nil {
		return nil, fmt.Errorf("%w: encode %s event: %w", ErrInvalid, e.Kind, err)
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(h)+len(e.Data))
	b = append(b, formatV1)
	b = binary.AppendUvarint(b, uint64(len(h)))
	b = append(b, h...)
	b = append(b, e.Data...)
	return b, nil
}

func decodeEvent(seq uint64, b []byte) (Event, error) {
	if len(b) < 2 || b[0] != formatV1 {
		return Event{}, fmt.Errorf("%w: event %d: unknown format", ErrCorrupt, seq)
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n > uint64(len(b)-1-w) {
		return Event{}, fmt.Errorf("%w: event %d: bad header length", ErrCorrupt, seq)
	}
	hb := b[1+w : 1+w+int(n)]
	var h eventHeader
	if err := json.Unmarshal(hb, &h); err != nil {
		return Event{}, fmt.Errorf("%w: event %d: %w", ErrCorrupt, seq, err)
	}
	e := Event{Seq: seq, Kind: h.Kind, Time: h.Time, Message: h.Message}
	if rest := b[1+w+int(n):]; len(rest) > 0 {
		e.Data = json.RawMessage(append([]byte(nil), rest...))
	}
	return e, nil
}

func encodeJSON(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte{formatV1}, j...), nil
}

func decodeJSON(what string, b []byte, v any) error {
	if len(b) < 1 || b[0] != formatV1 {
		return fmt.Errorf("%w: %s: unknown format", ErrCorrupt, what)
	}
	if err := json.Unmarshal(b[1:], v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)
	}
	return nil
}
