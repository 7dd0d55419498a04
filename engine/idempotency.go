package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/history"
)

// Idempotent appends (docs/api.md "Retrying an append"; docs/decisions.md
// "Idempotent appends"). An append made with a key records it, with the
// append's first seq and a digest of its request, on its last event —
// in the same write as the messages, so on both backends the key is
// stored if and only if the append is. A retry with the key finds it in
// the session (rebuilt from the log on every load, so on every node of a
// fleet) and is answered from the log.

// maxIdemKeys bounds the idempotency keys a loaded session remembers: the
// newest ones (a retry comes seconds after its first try).
const maxIdemKeys = 1024

// idemRec is one remembered append made with an idempotency key.
type idemRec struct {
	first, last uint64
	digest      string
}

// rememberKey records the append that ended at seq with k. Called with
// s.mu held (or on a session being loaded).
func (s *session) rememberKey(k checkpoint.Idempotency, seq uint64) {
	if s.idem == nil {
		s.idem = map[string]idemRec{}
	}
	if _, ok := s.idem[k.Key]; !ok {
		s.idemOrder = append(s.idemOrder, k.Key)
	}
	s.idem[k.Key] = idemRec{first: k.FirstSeq, last: seq, digest: k.Digest}
	if len(s.idemOrder) > maxIdemKeys {
		delete(s.idem, s.idemOrder[0])
		s.idemOrder = s.idemOrder[1:]
	}
}

// appendDigest identifies an append's request: its messages and client
// state as given.
func appendDigest(msgs []history.Message, clientState json.RawMessage) string {
	h := sha256.New()
	b, _ := json.Marshal(msgs)
	h.Write(b)
	h.Write([]byte{0})
	h.Write(clientState)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// replayAppend answers a retried append with what the first one stored:
// its messages and other events, read from the log, and the session's
// figures now. Called with s.mu held.
func (e *Engine) replayAppend(ctx context.Context, s *session, r idemRec) (AppendResult, error) {
	res := AppendResult{FirstSeq: r.first, LastSeq: r.last, Threshold: s.threshold, Replayed: true}
	err := e.opts.Log.Range(ctx, s.id, r.first, func(ev checkpoint.Event) error {
		if ev.Seq > r.last {
			return errStopRange
		}
		switch {
		case ev.Kind == checkpoint.KindMessage && ev.Message != nil:
			m := *ev.Message
			m.Seq = ev.Seq
			res.Messages = append(res.Messages, m)
		case ev.Kind == checkpoint.KindAbandonedRound:
			var d struct {
				IDs []string `json:"tool_call_ids"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			res.Abandoned += len(d.IDs)
			res.Events = append(res.Events, ev)
		default:
			res.Events = append(res.Events, ev)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopRange) {
		return AppendResult{}, mapLogErr(s.id, err)
	}
	res.Tokens, res.TokensSource = s.estimate()
	return res, nil
}

// errStopRange ends a Range early.
var errStopRange = errors.New("range stopped")
