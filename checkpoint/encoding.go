package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/history"
)

// Key layout (docs/design.md §8). Session ids never contain '/', so one
// session's keys are contiguous and no other session's key starts with its
// prefix.
//
//	s/<session>/meta        Meta
//	s/<session>/e/<seq>     Event, seq 8-byte big-endian
//	s/<session>/c/<seq>     Checkpoint, seq of its event
func sessionPrefix(session string) []byte { return []byte("s/" + session + "/") }

func metaKey(session string) []byte { return []byte("s/" + session + "/meta") }

func rowKey(session string) []byte { return []byte("s/" + session + "/row") }

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

// eventHeader is the JSON part of an encoded event. Seq lives in the key;
// the message and Data have sections of their own.
type eventHeader struct {
	Kind Kind         `json:"kind"`
	Time time.Time    `json:"time"`
	Idem *Idempotency `json:"idem,omitempty"`
}

// encodeEvent encodes e as: the format byte; the uvarint length and JSON of
// the header; the uvarint length and history.Encode bytes of the message
// (length 0: none); then Data verbatim. The message is in history's stable
// encoding (docs/design.md §2, §4), so what comes back re-encodes to the same
// bytes. Data is kept out of any JSON envelope, which would compact and
// escape it, so it comes back byte for byte.
func encodeEvent(e *Event) ([]byte, error) {
	h, err := json.Marshal(eventHeader{Kind: e.Kind, Time: e.Time, Idem: e.Idempotency})
	if err != nil {
		return nil, fmt.Errorf("%w: encode %s event: %w", ErrInvalid, e.Kind, err)
	}
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(h)+len(e.Data))
	b = append(b, formatV1)
	b = binary.AppendUvarint(b, uint64(len(h)))
	b = append(b, h...)
	// The message is encoded in place, after room for its length's
	// varint, then moved back over the room it did not use: one copy of
	// a message of tens of MB, not three.
	at := len(b)
	b = append(b, make([]byte, binary.MaxVarintLen64)...)
	if e.Message != nil {
		if b, err = history.AppendEncode(b, *e.Message); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	n := len(b) - at - binary.MaxVarintLen64
	k := binary.PutUvarint(b[at:], uint64(n))
	copy(b[at+k:], b[at+binary.MaxVarintLen64:])
	b = b[:at+k+n]
	b = append(b, e.Data...)
	return b, nil
}

// section splits off one uvarint-length-prefixed section of b.
func section(b []byte) (sec, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

func decodeEvent(seq uint64, b []byte) (Event, error) {
	if len(b) < 1 || b[0] != formatV1 {
		return Event{}, fmt.Errorf("%w: event %d: unknown format", ErrCorrupt, seq)
	}
	hb, rest, ok := section(b[1:])
	if !ok {
		return Event{}, fmt.Errorf("%w: event %d: bad header length", ErrCorrupt, seq)
	}
	mb, rest, ok := section(rest)
	if !ok {
		return Event{}, fmt.Errorf("%w: event %d: bad message length", ErrCorrupt, seq)
	}
	var h eventHeader
	if err := json.Unmarshal(hb, &h); err != nil {
		return Event{}, fmt.Errorf("%w: event %d: %w", ErrCorrupt, seq, err)
	}
	e := Event{Seq: seq, Kind: h.Kind, Time: h.Time, Idempotency: h.Idem}
	if len(mb) > 0 {
		m, err := history.Decode(mb)
		if err != nil {
			return Event{}, fmt.Errorf("%w: event %d: %w", ErrCorrupt, seq, err)
		}
		m.Seq = seq
		e.Message = &m
	}
	if len(rest) > 0 {
		e.Data = json.RawMessage(bytes.Clone(rest))
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
