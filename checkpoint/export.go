package checkpoint

import (
	"encoding/json"
	"time"
)

// The helpers below let another implementation of Log (the NATS one,
// docs/design.md §9) store events and checkpoints in the same encoding as Store,
// so both serve the same bytes.

// PrepareEvent validates e as an event to append (Event.Validate), sets a
// zero Time to now (UTC) and clears a message's seq. Errors wrap
// ErrInvalid.
func PrepareEvent(e Event, now func() time.Time) (Event, error) {
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	if e.Time.IsZero() {
		e.Time = now().UTC()
	} else {
		e.Time = e.Time.UTC()
	}
	if e.Message != nil && e.Message.Seq != 0 {
		m := *e.Message
		m.Seq = 0
		e.Message = &m
	}
	return e, nil
}

// EncodeEvent encodes e (without its seq) as Store stores it: a format byte,
// a JSON header, the message in history's stable encoding, then Data byte
// for byte. Errors wrap ErrInvalid.
func EncodeEvent(e *Event) ([]byte, error) { return encodeEvent(e) }

// DecodeEvent decodes what EncodeEvent returned, as the event with seq.
// Errors wrap ErrCorrupt.
func DecodeEvent(seq uint64, b []byte) (Event, error) { return decodeEvent(seq, b) }

// ValidateMeta checks the JSON fields of m. Errors wrap ErrInvalid.
func ValidateMeta(m *Meta) error { return m.validate() }

// ValidateCheckpoint checks cp as a checkpoint to put (no seq, a summary,
// a snapshot seq, first retained ≤ snapshot). Errors wrap ErrInvalid.
func ValidateCheckpoint(cp *Checkpoint) error { return cp.validate() }

// CheckpointEventData returns the Data of cp's KindCheckpoint event (a
// CheckpointEvent as JSON).
func CheckpointEventData(cp *Checkpoint) (json.RawMessage, error) { return json.Marshal(cp.event()) }
