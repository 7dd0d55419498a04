package engine

import (
	"encoding/json"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/contextedit"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
)

// sessionState is the part of a loaded session the log determines: the
// settings its rules read, the validation state, the active history with
// its sent-form estimates, the latest checkpoint and what it carries, the
// reported usage and its bookkeeping, the context-edit ledger, the savings
// ledger's totals and the failure circuit. Its methods are the rules that
// change it and read it — a message appended (appendMessage), a checkpoint
// applied (applyCheckpoint), a context-edit pass (applyPass), a savings
// ledger entry (applyLedger), the estimate of the assembled context
// (estimate) — and none does I/O: the same events applied in the same
// order give the same state, whether live or replayed from the log after
// a restart (docs/design.md §2 "Tokens", §8). The lock, the eviction
// figures, storage and jobs stay in session, which embeds it.
type sessionState struct {
	// est is the token estimator (its zero value: o200k).
	est history.Estimator

	// Settings, set by Engine.configure from the configuration and the
	// session's meta.
	cfg   config.Config
	model config.Model
	limit uint64
	// win is how model and limit were resolved: where the window came
	// from, what the stored settings differ in from the current
	// configuration; learned is what the provider said.
	win       window
	learned   *learnedWindow
	threshold uint64
	shape     string
	system    string
	tools     []history.ToolDef
	pinned    []history.Block
	// fixedTokens is the estimate of system prompt, tools and pinned
	// context, uncalibrated.
	fixedTokens uint64
	// editMode is the context-editing mode in effect ("local", "server"
	// or "off", docs/design.md §6) and editWhy its reason.
	editMode string
	editWhy  string
	// cal is the session's token calibrator for its model (docs/design.md §2
	// "Tokens"), rebuilt from the session's own log on load, so the
	// estimate — and every response carrying it — is a pure function of the
	// log, the same before and after a restart or an eviction.
	cal      *history.Calibrator
	calModel string

	// anchor is the provider's newest count of a whole request (a
	// reported usage: input + cache read + cache write; an overflow
	// error's count) and anchorRaw ctxd's uncalibrated estimate of that
	// same request, taken at message seq anchorSeq; anchor 0 before the
	// first. A context no usage covers (after a checkpoint) is estimated
	// from it: the count less ctxd's calibrated estimate of what left
	// since (docs/design.md §2), so figures before and after a compaction
	// are in one unit.
	anchor, anchorRaw, anchorSeq uint64
	// maxAccepted is the largest request the provider accepted, by its
	// reported usage (input + cache read + cache write), in tokens: a
	// window no smaller than it.
	maxAccepted uint64

	state   *history.State // validation state of the whole log
	lastMsg uint64         // seq of the newest message
	// changed is when a message, a patch or a checkpoint last changed the
	// session (Info.Updated; meta.Updated moves only with the meta).
	changed time.Time

	cp            *checkpoint.Checkpoint // latest, nil before the first
	summaryMsg    *history.Message
	summaryTokens uint64

	// The requests that survive compaction (docs/design.md §5.2): first is the
	// session's first user message and req the newest one (the prompt that
	// opened the current run), as appended; firstPinned and keptReq are
	// what the latest checkpoint carries of them outside the summary (nil:
	// nothing), with their sent-form estimates, uncalibrated.
	first, req           *entry
	firstPinned, keptReq *entry
	// futilityRun: the futility diagnostic was given in this run
	// (docs/design.md §5.2: one per run).
	futilityRun bool

	active       []entry
	activeTokens uint64
	// rewrites are the figures of each recorded rewrite (pass or
	// compaction) since load, rebuilt from the log (RewriteFigures).
	rewrites []rewriteFigure
	// compactedAt is the seq of the newest active message holding a
	// provider compaction block (history.BlockCompaction), 0 when none: the
	// provider drops everything before that block, so the messages before
	// it count no tokens.
	compactedAt uint64

	// usage is the newest reported usage after the latest checkpoint; usageAt
	// is the index in active just after the message that carried it (so
	// active[usageAt:] was appended since); sinceUsage sums their tokens;
	// editedSinceUsage is what passes removed from before usageAt.
	usage            *history.Usage
	usageOutput      uint64 // the response's output as counted: see outputTokens
	usageAt          int
	sinceUsage       uint64
	editedSinceUsage uint64

	// mode is the session's own proxy mode ("" follows [proxy] mode) and
	// totals its savings ledger's totals (docs/design.md §10).
	mode   string
	totals ledger.Totals
	// cacheAt is when the session's provider request was last sent (its
	// prompt cache refreshed) and cacheTTL the lifetime that request asked
	// for (idle.go).
	cacheAt  time.Time
	cacheTTL time.Duration

	// Failure circuit of the current run (docs/design.md §5.5).
	failures    int
	circuitOpen bool

	// Layers 1 and 2 (docs/design.md §6): the offload file of each
	// offloaded result by tool_call_id and the context-edit ledger.
	offloads map[string]string
	ledger   contextedit.Ledger
	// assistants counts the assistant messages appended; calls maps an open
	// call's id to the ordinal of the assistant message that made it and
	// the tool's name.
	assistants uint64
	calls      map[string]openCall

	// Bookkeeping for Info.
	messages    uint64 // message events in the log
	checkpoints uint64
}

// newSessionState is the state of a session with nothing applied yet.
func newSessionState() sessionState {
	return sessionState{state: &history.State{}, offloads: map[string]string{}}
}

// touch records a change of the session at t (UTC) for Info.Updated.
func (st *sessionState) touch(t time.Time) {
	if t.After(st.changed) {
		st.changed = t
	}
}

// appendMessage applies a stored message m (its Seq set) to the active
// history and the usage bookkeeping, after the validation state took it
// (history.State.Apply). It returns how much the memory the active
// history holds grew, in bytes (history.SizeHint).
func (st *sessionState) appendMessage(m history.Message) (grown int64) {
	if m.Tokens == 0 {
		st.est.Fill(&m)
	}
	t := st.sentTokens(m)
	st.messages++
	var chars uint64
	var inputs []callStrings
	var call openCall
	switch m.Role {
	case history.RoleTool:
		chars = contextedit.ResultChars(m)
		call = st.calls[m.ToolCallID]
		delete(st.calls, m.ToolCallID)
		if m.ToolName != "" {
			call.name = m.ToolName
		}
	case history.RoleAssistant:
		st.assistants++
		call.turn = st.assistants
		for _, b := range m.Content {
			if b.Type == history.BlockToolCall {
				if st.calls == nil {
					st.calls = map[string]openCall{}
				}
				st.calls[b.ID] = openCall{turn: st.assistants, name: b.Name}
				if _, n := contextedit.InputStrings(b.Input); len(n) > 0 {
					inputs = append(inputs, callStrings{id: b.ID, name: b.Name, chars: n})
				}
			}
		}
	case history.RoleUser:
		clear(st.calls) // open calls are abandoned
	}
	en := entry{msg: m, tokens: t, chars: chars, turn: call.turn, tool: call.name, inputs: inputs}
	if history.IsPersonPrompt(m) {
		// The current and the first request are prompts a person wrote,
		// never a reminder or an agent's environment item (docs/design.md
		// §5.2).
		c := en
		st.req = &c
		if st.first == nil {
			st.first = &c
		}
	}
	st.active = append(st.active, en)
	st.activeTokens += t
	grown = int64(history.SizeHint(m))
	if history.LastCompaction(m) >= 0 {
		// A provider compaction: what precedes it is no longer billed.
		st.compactedAt = m.Seq
		st.retokenize()
	}
	st.lastMsg = m.Seq
	if m.Role == history.RoleAssistant && m.Usage != nil && m.Usage.TotalTokens() > 0 {
		st.observeUsage(m)
		// The request this answer's usage counts is the context before it.
		st.maxAccepted = max(st.maxAccepted, m.Usage.ContextTokens())
		// A count after the provider's own edits is of less than was
		// sent: plausible when the request as sent is.
		if n, raw := m.Usage.ContextTokens(), st.fixedTokens+st.carriedTokens()+st.summaryTokens+st.activeTokens-t; plausibleCount(n+m.Usage.ClearedInputTokens, raw) {
			st.anchor, st.anchorRaw, st.anchorSeq = n, raw, m.Seq
		}
		u := *m.Usage
		st.usage = &u
		st.usageOutput = st.outputTokens(m)
		st.usageAt = len(st.active)
		st.sinceUsage = 0
		st.editedSinceUsage = 0
		return grown
	}
	st.sinceUsage += t
	if history.IsPersonPrompt(m) {
		// A user prompt begins a new run (docs/design.md §5.5).
		st.failures = 0
		st.circuitOpen = false
		st.futilityRun = false
	}
	return grown
}

// applyStored applies a message as stored, its seq set, to the
// validation state, the offload index (off: its offload event, nil when
// none) and the active history (appendMessage), returning how much the
// memory the active history holds grew, in bytes.
func (st *sessionState) applyStored(m history.Message, off *checkpoint.Event) (grown int64) {
	st.state.Apply(m)
	if off != nil && off.Kind == checkpoint.KindOffload {
		var rec struct {
			Path string `json:"path"`
		}
		_ = json.Unmarshal(off.Data, &rec)
		st.offloads[m.ToolCallID] = rec.Path
	}
	return st.appendMessage(m)
}

// sentTokens is the estimate of m as it is sent: the stored estimate, or
// that of its rendering when context editing or withheld thinking changed
// it; 0 before a provider compaction block, which the provider replaces by
// its summary.
func (st *sessionState) sentTokens(m history.Message) uint64 {
	if m.Seq < st.compactedAt {
		return 0 // before a provider compaction block
	}
	if r, changed := st.renderChanged(m); changed {
		return st.est.Message(r)
	}
	return m.Tokens
}

// observeUsage feeds the model's calibrator with the growth between two
// consecutive reported usages: reported (this request's context − the
// previous request's context − the previous response's output) against the
// estimate of the messages appended between them (docs/design.md §2 "Tokens").
// Growth, not whole requests, so a system prompt the agent never gave ctxd
// does not bias the factor. Both requests are taken as sent: with what the
// provider's own context editing cleared before counting them
// (Usage.ClearedInputTokens) added back, so an edit the provider applied
// is not read as ctxd's estimate counting too much.
func (st *sessionState) observeUsage(m history.Message) {
	if st.usage == nil || st.editedSinceUsage > 0 {
		return
	}
	prev := st.usage.ContextTokens() + st.usage.ClearedInputTokens + st.usageOutput
	now := m.Usage.ContextTokens() + m.Usage.ClearedInputTokens
	if now <= prev || st.sinceUsage == 0 {
		return
	}
	st.cal.Observe(now-prev, st.sinceUsage)
}

// outputTokens is what the response m adds to the next request: its
// reported output_tokens when plausible, else its calibrated estimate.
// Some agents log a streaming snapshot of usage whose output_tokens is the
// first few tokens only (Claude Code 2.x: 74 of 139 responses of the corpus);
// no model tokenizer counts below half of o200k, so a reported output under
// half the estimate is taken as such a snapshot (docs/decisions.md
// "Estimator accuracy").
func (st *sessionState) outputTokens(m history.Message) uint64 {
	reported := m.Usage.OutputTokens
	if reported*2 >= m.Tokens {
		return reported
	}
	return st.calibrate(m.Tokens)
}

// applyCheckpoint makes cp the session's latest checkpoint: the summary
// replaces everything before FirstRetainedSeq (or after SnapshotSeq when
// nothing is retained); reported usage before it is never used again
// (docs/design.md §2 "Tokens"). It returns the memory the active history
// now holds, the summary included, in bytes (history.SizeHint).
func (st *sessionState) applyCheckpoint(cp checkpoint.Checkpoint) (mem int64) {
	// What the compaction costs and saves (docs/design.md §4): the next
	// request writes its whole context again; every later one sends the
	// difference no more. Both in the checkpoint's own unit.
	f := rewriteFigure{rewritten: cp.TokensAfter, at: st.assistants, compaction: true}
	if cp.TokensBefore > cp.TokensAfter {
		f.saved = cp.TokensBefore - cp.TokensAfter
	}
	st.rewrites = append(st.rewrites, f)
	c := cp
	st.cp = &c
	st.checkpoints++
	st.touch(cp.Time)
	sm := summaryMessage(cp)
	st.summaryMsg = &sm
	st.summaryTokens = st.est.Message(sm)
	keepFrom := cp.SnapshotSeq + 1
	if cp.FirstRetainedSeq > 0 {
		keepFrom = cp.FirstRetainedSeq
	}
	st.keptReq = st.carried(cp.Request)
	st.firstPinned = st.carried(cp.FirstRequest)
	kept := st.active[:0:0]
	var total uint64
	mem = int64(history.SizeHint(sm))
	for _, en := range st.active {
		if en.msg.Seq >= keepFrom {
			kept = append(kept, en)
			total += en.tokens
			mem += int64(history.SizeHint(en.msg))
		}
	}
	st.active = kept
	st.activeTokens = total
	st.usage = nil
	st.usageAt = 0
	st.sinceUsage = total
	st.editedSinceUsage = 0
	if cp.Stalled {
		st.failures++
	} else {
		// A successful checkpoint of any reason closes the circuit
		// (docs/design.md §5.5).
		st.failures = 0
		st.circuitOpen = false
	}
	return mem
}

// carried returns the entry a checkpoint carries outside its summary
// (docs/design.md §5.2): the stored message with c.Seq as it is sent, or its
// stub. nil for nil c or a message no longer known. Called before the
// checkpoint drops what it covers.
func (st *sessionState) carried(c *checkpoint.Carried) *entry {
	if c == nil {
		return nil
	}
	if c.Stub != "" {
		m := history.Message{Seq: c.Seq, Role: history.RoleUser, Content: []history.Block{{Type: history.BlockText, Text: c.Stub}}}
		return &entry{msg: m, tokens: st.est.Message(m)}
	}
	for _, en := range st.active {
		if en.msg.Seq == c.Seq {
			en := en
			return &en
		}
	}
	for _, en := range []*entry{st.keptReq, st.firstPinned, st.req, st.first} {
		if en != nil && en.msg.Seq == c.Seq {
			c := *en
			return &c
		}
	}
	return nil
}

// plausibleCount reports whether a provider's count of a whole request
// can be of the context ctxd estimated at raw (uncalibrated): their ratio
// within the calibrator's plausible factors. A count far outside is of
// something else — a transcript that starts mid-session, a test's made-up
// usage, an error body of another request — and anchors nothing.
func plausibleCount(count, raw uint64) bool {
	if count == 0 || raw < history.MinCalibrationTokens {
		return false
	}
	r := float64(count) / float64(raw)
	return r >= history.MinFactor && r <= history.MaxFactor
}

// rawAfter is ctxd's uncalibrated estimate of the assembled context once
// cp, whose summary message is summaryTokens, is applied: the fixed
// prefix, the summary, the messages it retains and those after its
// snapshot, and the requests it carries beside the summary. Called before
// cp is applied.
func (st *sessionState) rawAfter(cp checkpoint.Checkpoint, summaryTokens uint64) uint64 {
	after := st.fixedTokens + summaryTokens
	for _, en := range st.active {
		if (cp.FirstRetainedSeq > 0 && en.msg.Seq >= cp.FirstRetainedSeq) || en.msg.Seq > cp.SnapshotSeq {
			after += en.tokens
		}
	}
	for _, c := range []*checkpoint.Carried{cp.Request, cp.FirstRequest} {
		if en := st.carried(c); en != nil {
			after += en.tokens
		}
	}
	return after
}

// carriedTokens is the sent-form estimate of the requests the latest
// checkpoint carries outside its summary, uncalibrated.
func (st *sessionState) carriedTokens() uint64 {
	var n uint64
	for _, en := range []*entry{st.firstPinned, st.keptReq} {
		if en != nil {
			n += en.tokens
		}
	}
	return n
}

// factor is the session model's calibration factor.
func (st *sessionState) factor() float64 {
	return st.cal.Factor()
}

// calibrate is raw, an uncalibrated estimate in tokens, in the provider's
// tokens by the session's calibration factor.
func (st *sessionState) calibrate(raw uint64) uint64 {
	return st.cal.Apply(raw)
}

// estimate is the session's assembled-context size in tokens and its
// source: the newest reported usage (input + cache + output) plus the
// calibrated estimate of what was appended since, less what context editing
// removed; or, with no usage since the latest checkpoint, the calibrated
// estimate of the whole assembled context (docs/design.md §2, §5.1).
func (st *sessionState) estimate() (uint64, string) {
	if st.usage != nil {
		n := st.usage.ContextTokens() + st.usageOutput
		removed := st.calibrate(st.editedSinceUsage)
		// The provider's own edits cleared the oldest tool uses before
		// it counted n, as ctxd's passes elide the oldest results: what a
		// pass removed since is taken off n only beyond what the
		// provider had cleared already (no double count).
		removed -= min(removed, st.usage.ClearedInputTokens)
		if removed >= n {
			n = 0
		} else {
			n -= removed
		}
		if st.sinceUsage == 0 && st.editedSinceUsage == 0 && st.usageOutput == st.usage.OutputTokens {
			return n, SourceReported
		}
		return n + st.calibrate(st.sinceUsage), SourceEstimated
	}
	return st.scaled(st.rawTokens()), SourceEstimated
}

// rawTokens is ctxd's uncalibrated estimate of the whole assembled
// context.
func (st *sessionState) rawTokens() uint64 {
	return st.fixedTokens + st.carriedTokens() + st.summaryTokens + st.activeTokens
}

// scaled is a whole context's estimate in the provider's tokens, for raw,
// ctxd's uncalibrated estimate of it: anchored at the provider's newest
// count of a whole request (anchor) when there is one — that count, less
// (or plus) ctxd's calibrated estimate of what changed since — else the
// calibrated estimate. Never less than raw's calibrated estimate's half
// (a count that far below ctxd's estimate of what remains is stale).
func (st *sessionState) scaled(raw uint64) uint64 {
	est := st.calibrate(raw)
	if st.anchor == 0 {
		return est
	}
	var n uint64
	if raw >= st.anchorRaw {
		n = st.anchor + st.calibrate(raw-st.anchorRaw)
	} else if d := st.calibrate(st.anchorRaw - raw); d < st.anchor {
		n = st.anchor - d
	}
	return max(n, est/2)
}

// retokenize recomputes the sent-form estimate of every active message after
// a change to what is sent (a context-edit pass, withheld thinking). What the
// change removed from messages the newest reported usage already covered is
// taken off that usage's figure (editedSinceUsage).
func (st *sessionState) retokenize() {
	var total, since, removedBeforeUsage uint64
	for i := range st.active {
		old := st.active[i].tokens
		t := st.sentTokens(st.active[i].msg)
		st.active[i].tokens = t
		total += t
		if st.usage != nil && i < st.usageAt && t < old {
			removedBeforeUsage += old - t
		}
		if i >= st.usageAt {
			since += t
		}
	}
	st.activeTokens = total
	if st.usage != nil {
		st.sinceUsage = since
		st.editedSinceUsage += removedBeforeUsage
	}
}

// applyPass applies a recorded pass to the session: the ledger, the
// withheld-thinking point, and the sent-form estimates of what it changed.
// The same function serves live passes and the log's replay after a
// restart, so both give identical state.
func (st *sessionState) applyPass(p contextedit.Pass) {
	before := make([]uint64, len(st.active))
	for i := range st.active {
		before[i] = st.active[i].tokens
	}
	total := st.activeTokens
	st.ledger.Apply(p)
	st.retokenize()
	// What the pass costs and saves (docs/design.md §4): from the first
	// message it changed on, the next request writes the cache again;
	// every later request sends what it removed no more.
	var rewritten uint64
	for i := range st.active {
		if rewritten > 0 || st.active[i].tokens != before[i] {
			rewritten += st.active[i].tokens
		}
	}
	var saved uint64
	if total > st.activeTokens {
		saved = total - st.activeTokens
	}
	st.rewrites = append(st.rewrites, rewriteFigure{rewritten: rewritten, saved: saved, at: st.assistants})
}

// applyLedger adds one savings ledger entry to the session's totals (or
// its mode); a request's entry refreshes the prompt cache's time.
func (st *sessionState) applyLedger(en ledger.Entry) {
	if en.Kind == ledger.KindMode {
		st.mode = en.Mode
		return
	}
	st.noteLedgerRequest(en)
	st.totals.Add(en)
}

// noteLedgerRequest is noteRequest for a proxied request's ledger entry,
// whose lifetime is the one it names (CacheTTLSeconds, from the request's
// cache markers or retention) or the one its 1-hour writes show.
func (st *sessionState) noteLedgerRequest(en ledger.Entry) {
	if en.Kind != ledger.KindRequest || en.Time.Before(st.cacheAt) {
		return
	}
	st.cacheAt = en.Time
	switch {
	case en.CacheTTLSeconds > 0:
		st.cacheTTL = time.Duration(en.CacheTTLSeconds) * time.Second
	case en.Reported.CacheWrite1h > 0:
		st.cacheTTL = CacheTTLLong
	case st.cacheTTL == 0:
		st.cacheTTL = CacheTTLDefault
	}
}

// activeMessages is the message list of the assembled context: pinned
// context, the first request the latest checkpoint carries, the summary,
// the current request it carries (docs/design.md §5.2), then the active history
// as it is sent.
func (st *sessionState) activeMessages() []history.Message {
	out := make([]history.Message, 0, len(st.active)+2)
	if len(st.pinned) > 0 {
		out = append(out, pinnedMessage(st.pinned))
	}
	if st.firstPinned != nil {
		out = append(out, st.firstPinned.msg)
	}
	if st.summaryMsg != nil {
		out = append(out, *st.summaryMsg)
	}
	if st.keptReq != nil {
		out = append(out, st.keptReq.msg)
	}
	for _, en := range st.active {
		out = append(out, st.renderEntry(en))
	}
	return out
}

// renderEntry is render(en.msg), an elided result's stub made with the
// size the entry keeps: counting the characters of every elided result
// again cost each request's assembly a pass over all of them.
func (st *sessionState) renderEntry(en entry) history.Message {
	if m := en.msg; m.Role == history.RoleTool && st.ledger.Elided(m.ToolCallID) {
		return contextedit.ElidedResult(m, en.chars, st.offloads[m.ToolCallID])
	}
	return st.render(en.msg)
}

// render returns m as it is sent: an elided tool result as its stub
// (docs/design.md §6), thinking withheld after a recorded rewrite for
// thinking-bound models (§4), and an assistant message's trailing thinking
// dropped (§4a: an interrupted response). Same state, same bytes.
func (st *sessionState) render(m history.Message) history.Message {
	r, _ := st.renderChanged(m)
	return r
}

// renderChanged is render, and whether the sent form differs from m.
func (st *sessionState) renderChanged(m history.Message) (history.Message, bool) {
	switch m.Role {
	case history.RoleTool:
		if st.ledger.Elided(m.ToolCallID) {
			return st.ledger.Render(m, st.offloads[m.ToolCallID]), true
		}
	case history.RoleAssistant:
		changed := false
		if st.ledger.Changes(m) {
			m, changed = st.ledger.Render(m, ""), true
		}
		// A response interrupted while reasoning ends with thinking, which
		// the provider refuses (docs/design.md §4a).
		if r, ok := history.DropTrailingThinking(m); ok {
			m, changed = r, true
		}
		return m, changed
	}
	return m, false
}

// openRound reports whether a tool call of the session waits on its result.
func (st *sessionState) openRound() bool { return len(st.state.Open()) > 0 }

// inThinkingLoop reports whether an open tool loop of a thinking-bound model
// is in progress: the newest message is a tool result or an assistant
// message whose calls wait on their results, and the newest assistant
// message carries thinking. The provider then requires that message to be
// sent with its thinking first, so no rewrite may withhold it (docs/design.md
// §4a): passes and prompt or tool changes wait for the loop's end (the next
// user prompt), and a compaction folds the loop.
func (st *sessionState) inThinkingLoop() bool {
	if !st.model.ThinkingBinding || len(st.active) == 0 {
		return false
	}
	if st.active[len(st.active)-1].msg.Role != history.RoleTool && !st.openRound() {
		return false
	}
	for i := len(st.active) - 1; i >= 0; i-- {
		if m := st.active[i].msg; m.Role == history.RoleAssistant {
			return contextedit.HasThinking(m)
		}
	}
	return false
}

// newGroupSinceCheckpoint: something was appended after the latest
// checkpoint's snapshot (the no-loop rule of docs/design.md §5.1).
func (st *sessionState) newGroupSinceCheckpoint() bool {
	if st.cp == nil {
		return len(st.active) > 0
	}
	return st.lastMsg > st.cp.SnapshotSeq
}

// addActive applies a stored message to the session's state
// (sessionState.appendMessage) and counts the memory it holds. Called
// with s.mu held (or during load).
func (s *session) addActive(m history.Message) {
	s.memBytes.Add(s.appendMessage(m))
}

// useCheckpoint applies cp to the session's state
// (sessionState.applyCheckpoint) and counts the memory it leaves. Called
// with s.mu held (or during load).
func (s *session) useCheckpoint(cp checkpoint.Checkpoint) {
	s.memBytes.Store(s.applyCheckpoint(cp))
}
