package replay

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/ledger"
)

// Cost is what a replayed session costs without ctxd and with it
// (docs/design.md §10, `ctxctl replay`): every request the agent sent, on
// the ledger's prompt-cache model, priced with the model's price.
type Cost struct {
	// Model is the transcript's model; Priced is false when it has no
	// price (costs are then 0, tokens still counted).
	Model  string `json:"model"`
	Priced bool   `json:"priced"`
	// Price is the price used, US dollars per million tokens.
	Price config.Price `json:"price"`
	// Totals: WithoutCtxd is the agent's own requests (each the whole
	// history, its prefix read from the cache as far as it was written
	// and alive), Paid ctxd's requests, Summarizer ctxd's summarizer
	// calls, Saved = WithoutCtxd − Paid − Summarizer and SavedShare its
	// share of WithoutCtxd; CacheWrites ctxd's cache writes by cause;
	// Reported is ctxd's requests' usage and Counterfactual the agent's.
	Totals ledger.Totals `json:"totals"`
}

// costRun models the two request streams of a replay.
type costRun struct {
	cfg     config.Config
	model   string
	client  [][]byte // the agent's messages so far, encoded
	conv    ledger.Conversation
	sent    ledger.CacheModel
	now     time.Time
	lastSeq uint64
	cost    Cost
}

func newCostRun(cfg config.Config, model string) *costRun {
	c := &costRun{cfg: cfg, model: model, now: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.cost.Model = model
	c.cost.Price, c.cost.Priced = ledger.PriceOf(cfg, model)
	return c
}

// add records messages the agent appended (its own history grows by them).
func (c *costRun) add(msgs ...history.Message) {
	for _, m := range msgs {
		m.Seq, m.Tokens = 0, 0
		b, _ := history.Encode(m)
		c.client = append(c.client, b)
		if !m.Time.IsZero() && m.Time.After(c.now) {
			c.now = m.Time
		}
	}
}

// request enters the request before a response: ctxd's assembled context a
// against the agent's whole history, output tokens of the response.
func (c *costRun) request(ctx context.Context, e *engine.Engine, a *engine.Assembled, output uint64) {
	c.now = c.now.Add(time.Second)
	tools, _ := json.Marshal(a.Tools)
	head := [][]byte{tools, []byte(a.System)}
	sent := ledger.Request{Model: c.model, Elements: append(append([][]byte{}, head...), encodeAll(a.Messages)...)}
	client := ledger.Request{Model: c.model, Elements: append(append([][]byte{}, head...), c.client...)}
	sent.LastMarker, client.LastMarker = len(sent.Elements)-1, len(client.Elements)-1
	rate := 0.0
	if n := sent.Bytes(); n > 0 {
		rate = float64(a.Tokens) / float64(n)
	}
	tok := func(b int) uint64 { return uint64(math.Round(float64(b) * rate)) }
	b := c.sent.Bill(sent, c.now)
	reported := ledger.Usage{Input: tok(b.Input), CacheRead: tok(b.Read), CacheWrite5m: tok(b.Write), Output: output}
	var rewrites []string
	seen := map[string]bool{}
	_ = e.Events(ctx, SessionID, c.lastSeq+1, false, func(ev checkpoint.Event) error {
		if ev.Seq > a.LastSeq {
			return errStop
		}
		k := ledger.RewriteCause(ev.Kind)
		if k != "" && !seen[k] {
			seen[k] = true
			rewrites = append(rewrites, k)
		}
		return nil
	})
	c.lastSeq = a.LastSeq
	en := c.conv.Entry(ledger.Observation{Time: c.now, Model: c.model, Mode: ledger.ModeEnforce, Client: client, Ctxd: sent,
		Reported: reported, Rewrites: rewrites, ContextLimit: a.ContextLimit, Threshold: a.Threshold})
	en.Cold = false
	en.Price(c.cfg)
	c.cost.Totals.Add(en)
}

// finish adds the summarizer calls the engine entered in the session's
// ledger.
func (c *costRun) finish(ctx context.Context, e *engine.Engine) Cost {
	if entries, _, err := e.Ledger(ctx, SessionID); err == nil {
		for _, en := range entries {
			if en.Kind == ledger.KindSummarizer {
				c.cost.Totals.Add(en)
			}
		}
	}
	return c.cost
}

func encodeAll(msgs []history.Message) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		m.Seq, m.Tokens = 0, 0
		out[i], _ = history.Encode(m)
	}
	return out
}
