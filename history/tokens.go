package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// Token estimation (docs/design.md §2 "Tokens"). Each message is counted once, at
// append, with the o200k_base encoding whose tables are compiled into the
// binary (nothing is downloaded), plus small fixed overheads for the framing
// a provider adds around messages and blocks. A per-model Calibrator scales
// the o200k count to the model's own tokenizer.

// MaxCountBytes is the largest input, in bytes, given to one tokenizer Count
// call. Longer texts are counted in chunks of at most this size, cut at a
// word or line boundary where one lies in the chunk's second half, else at a
// code-point boundary, so counting time is linear in the text's length
// whatever its content (the tokenizer's merge step is superlinear in the
// length of one pre-tokenized piece, such as a long run of one character).
// A cut at a boundary changes nothing; a cut inside a run changes the count
// by about one token per chunk.
const MaxCountBytes = 64 << 10

// Fixed overheads, in o200k tokens, fitted on the growth between consecutive
// responses of the Claude Code corpus (docs/decisions.md "Token estimation"):
// what a provider's chat format adds around each message (role markers,
// separators) and each content block (block type, delimiters), beside the
// block's own text.
const (
	MessageOverheadTokens = 4
	BlockOverheadTokens   = 3
	// ToolCallOverheadTokens is a tool_call block's extra framing beside its
	// id, name and input (the call's wrapper and parameter markup).
	ToolCallOverheadTokens = 20
	// ToolResultOverheadTokens is a tool message's extra framing beside its
	// call id and content (the result's wrapper).
	ToolResultOverheadTokens = 10
)

// ImageTokens is the estimate for one image block, in tokens, whatever its
// size: Anthropic counts width×height/750 tokens for an image it has scaled
// to at most about 1.15 megapixels, so ~1600 is the most one image costs.
// Overestimating small images is the safe side: compaction comes earlier,
// never later. Images stored as artifacts count the same.
const ImageTokens = 1600

// codec is the shared o200k_base codec, built on first use. Its Count is
// safe for concurrent use: it reads the vocabulary and runs the pre-tokenizer
// regexp, which keeps no state between calls.
var codec = sync.OnceValue(func() tokenizer.Codec {
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		panic("history: o200k_base codec: " + err.Error()) // compiled in: cannot happen
	}
	return c
})

// Estimator counts tokens with o200k_base. The zero value is ready to use
// and, like all its methods, safe for concurrent use: the codec is shared.
type Estimator struct {
	// ChunkBytes caps the input of one tokenizer call, in bytes;
	// 0 means MaxCountBytes. Values below 16 are raised to 16.
	ChunkBytes int
}

func (e Estimator) chunk() int {
	switch {
	case e.ChunkBytes <= 0:
		return MaxCountBytes
	case e.ChunkBytes < 16:
		return 16
	}
	return e.ChunkBytes
}

// Text returns the o200k_base tokens of s, counted in chunks of at most
// ChunkBytes bytes (see MaxCountBytes), in time linear in len(s). Each
// chunk's count is the tokenizer's Count of it, computed through the piece
// cache (countcache.go).
func (e Estimator) Text(s string) uint64 {
	limit := e.chunk()
	var n uint64
	for len(s) > 0 {
		piece := s
		if len(s) > limit {
			piece = s[:cutPoint(s, limit)]
		}
		n += uint64(countPieces(piece))
		s = s[len(piece):]
	}
	return n
}

// cutPoint returns where to end a chunk of s (len(s) > limit): 0 < cut ≤
// limit, preferring, from the end of the window back to its middle, a cut
// before a space that starts a word (" word" stays one piece) or after a
// newline followed by text, else the last code-point boundary.
func cutPoint(s string, limit int) int {
	for i := limit; i > limit/2; i-- {
		c := s[i]
		if c == ' ' && i+1 < len(s) && !isSpace(s[i-1]) && !isSpace(s[i+1]) {
			return i
		}
		if s[i-1] == '\n' && !isSpace(c) {
			return i
		}
	}
	for i := limit; i > limit-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return limit // not UTF-8 here: any cut will do
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r'
}

// Message returns m's estimated tokens (o200k, before calibration): the
// overheads above plus the tokens of every text m carries — text and thinking
// text, a tool call's id, name and input JSON, json blocks, a tool message's
// call id and tool name — plus ImageTokens per image, and for a
// redacted_thinking block 3/16 of its data's length (base64 of encrypted
// reasoning: about one token per four plaintext bytes). Thinking signatures
// are not counted: providers do not bill them as input.
//
// A message holding a compaction block (BlockCompaction) counts from its
// last one on: the provider drops every block before it.
func (e Estimator) Message(m Message) uint64 {
	n := uint64(MessageOverheadTokens)
	if m.Role == RoleTool {
		n += ToolResultOverheadTokens + e.Text(m.ToolCallID) + e.Text(m.ToolName)
	}
	from := max(LastCompaction(m), 0)
	for i := from; i < len(m.Content); i++ {
		b := &m.Content[i]
		n += BlockOverheadTokens
		switch b.Type {
		case BlockText, BlockThinking:
			n += e.Text(b.Text)
		case BlockCompaction:
			// An opaque (encrypted) compaction counts like encrypted
			// reasoning.
			n += e.Text(b.Text) + uint64(len(b.Data))*3/16
		case BlockToolCall:
			n += ToolCallOverheadTokens + e.Text(b.ID) + e.Text(b.Name) + e.Text(string(b.Input))
		case BlockJSON:
			n += e.Text(string(b.JSON))
		case BlockImage:
			n += ImageTokens
		case BlockRedactedThinking:
			n += uint64(len(b.Data)) * 3 / 16
		}
	}
	return n
}

// LastCompaction returns the index in m.Content of m's last compaction
// block, or -1 when it has none.
func LastCompaction(m Message) int {
	for i := len(m.Content) - 1; i >= 0; i-- {
		if m.Content[i].Type == BlockCompaction {
			return i
		}
	}
	return -1
}

// CompactionIndex returns the index in msgs of the last message holding a
// compaction block, or -1: the provider ignores everything before that
// block, so an estimate of msgs counts msgs[i:] only, and of msgs[i] the
// blocks from the compaction block on (Estimator.Message).
func CompactionIndex(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if LastCompaction(msgs[i]) >= 0 {
			return i
		}
	}
	return -1
}

// Fill sets m.Tokens to Message(*m) when it is 0 (not counted yet) and
// returns m.Tokens: a message is counted once, at append (docs/design.md §2).
func (e Estimator) Fill(m *Message) uint64 {
	if m.Tokens == 0 {
		m.Tokens = e.Message(*m)
	}
	return m.Tokens
}

// Calibration limits (docs/design.md §2 "Tokens").
const (
	// CalibrationAlpha is the weight of a new sample in the factor's
	// exponentially weighted moving average: the factor moves 30 % of the
	// way to each sample, so a model's first few reports dominate the
	// catalog's default within about five, while one odd request moves it
	// little.
	CalibrationAlpha = 0.3
	// MinCalibrationTokens is the smallest estimate, in tokens, of a request
	// whose sample is used: in a tiny request the fixed overheads dominate
	// and the ratio says little about the tokenizer.
	MinCalibrationTokens = 256
	// MinFactor and MaxFactor bound a plausible factor: a sample outside is
	// absurd (a wrong pairing of usage and estimate) and is ignored, and a
	// restored or initial factor outside is refused.
	MinFactor = 0.25
	MaxFactor = 4.0
)

// ErrFactor is returned for a factor outside [MinFactor, MaxFactor].
var ErrFactor = errors.New("token factor out of range")

// Calibrator learns one model's token factor (docs/design.md §2 "Tokens"): the
// model's reported input tokens ÷ the o200k estimate of the same request,
// smoothed. Keep one per model. It starts at the model catalog's factor
// (config `token_factor`, e.g. 1.35 for Claude models). All methods are
// safe for concurrent use.
type Calibrator struct {
	mu      sync.Mutex
	initial float64
	factor  float64
	samples uint64
}

// NewCalibrator returns a Calibrator whose factor is initial until a sample
// arrives. It returns ErrFactor when initial is outside [MinFactor,
// MaxFactor] or not a number.
func NewCalibrator(initial float64) (*Calibrator, error) {
	if !validFactor(initial) {
		return nil, fmt.Errorf("history: initial %w: %v", ErrFactor, initial)
	}
	return &Calibrator{initial: initial, factor: initial}, nil
}

func validFactor(f float64) bool { return f >= MinFactor && f <= MaxFactor }

// Observe adds one sample: reported is the provider's input tokens for a
// request (input + cache creation + cache read), estimated the o200k
// estimate of that same request, both in tokens. It returns false, and
// changes nothing, for a sample it ignores: estimated below
// MinCalibrationTokens, reported 0, or a ratio outside [MinFactor,
// MaxFactor].
func (c *Calibrator) Observe(reported, estimated uint64) bool {
	if estimated < MinCalibrationTokens || reported == 0 {
		return false
	}
	r := float64(reported) / float64(estimated)
	if !validFactor(r) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.factor += CalibrationAlpha * (r - c.factor)
	c.samples++
	return true
}

// Factor returns the current factor: model tokens per o200k token.
func (c *Calibrator) Factor() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.factor
}

// Samples returns how many samples the factor has learned from.
func (c *Calibrator) Samples() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.samples
}

// Apply scales an o200k estimate (tokens) to the model's tokens, rounding
// up: an estimate errs on the side of compacting early.
func (c *Calibrator) Apply(estimated uint64) uint64 {
	f := float64(estimated) * c.Factor()
	if f >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(math.Ceil(f))
}

// CalibratorState is a Calibrator saved: what MarshalJSON writes.
type CalibratorState struct {
	// Initial is the factor the calibrator started from.
	Initial float64 `json:"initial"`
	// Factor is the learned factor.
	Factor float64 `json:"factor"`
	// Samples is the number of samples learned from.
	Samples uint64 `json:"samples"`
}

// State returns the calibrator's state, to save.
func (c *Calibrator) State() CalibratorState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CalibratorState{Initial: c.initial, Factor: c.factor, Samples: c.samples}
}

// RestoreCalibrator returns a Calibrator continuing from a saved state. It
// returns ErrFactor when either factor is out of range.
func RestoreCalibrator(s CalibratorState) (*Calibrator, error) {
	if !validFactor(s.Initial) || !validFactor(s.Factor) {
		return nil, fmt.Errorf("history: restore calibrator: %w: initial %v, factor %v", ErrFactor, s.Initial, s.Factor)
	}
	return &Calibrator{initial: s.Initial, factor: s.Factor, samples: s.Samples}, nil
}

// MarshalJSON encodes State().
func (c *Calibrator) MarshalJSON() ([]byte, error) {
	return json.Marshal(c.State())
}

// UnmarshalJSON restores a state MarshalJSON wrote, strictly (unknown fields
// are an error); it returns ErrFactor for an out-of-range factor.
func (c *Calibrator) UnmarshalJSON(data []byte) error {
	var s CalibratorState
	if err := decodeStrict(data, &s); err != nil {
		return fmt.Errorf("history: restore calibrator: %w", err)
	}
	r, err := RestoreCalibrator(s)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.initial, c.factor, c.samples = r.initial, r.factor, r.samples
	return nil
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown
// fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}
