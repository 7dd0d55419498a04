// Package ledger is ctxd's savings ledger (docs/design.md §10 "Proof a user
// can see"): for every proxied request what the client would have sent,
// what ctxd sent, what the provider reported, and the cause of every
// prompt-cache write that was not the client's own growth; summarizer calls
// as entries of their own; costs from a price table; net savings with their
// denominators named. It holds the arithmetic and the cache model only: the
// proxy fills entries, the engine stores them in the session's log.
package ledger

import (
	"fmt"
	"maps"
	"math"

	"github.com/ctxd/ctxd/config"
)

// defaultPrices are the providers' list prices of the catalog's models, in
// US dollars per million tokens (Anthropic: a 5-minute cache write is 1.25 ×
// input, a 1-hour write 2 ×, a read 0.1 ×; OpenAI: no write surcharge, a
// read at the model's cached-input price). Open-weight models served by the
// operator cost nothing per token here; give them a price in [models] to
// see costs.
var defaultPrices = map[string]config.Price{
	"claude-opus-4":     anthropic(15, 75),
	"claude-opus-4-0":   anthropic(15, 75),
	"claude-opus-4-1":   anthropic(15, 75),
	"claude-opus-4-5":   anthropic(5, 25),
	"claude-opus-4-6":   anthropic(5, 25),
	"claude-opus-4-7":   anthropic(5, 25),
	"claude-opus-4-8":   anthropic(5, 25),
	"claude-sonnet-4":   anthropic(3, 15),
	"claude-sonnet-4-0": anthropic(3, 15),
	"claude-sonnet-4-5": anthropic(3, 15),
	"claude-sonnet-4-6": anthropic(3, 15),
	"claude-haiku-4-5":  anthropic(1, 5),

	"gpt-4o":       openai(2.5, 1.25, 10),
	"gpt-4o-mini":  openai(0.15, 0.075, 0.6),
	"gpt-4.1":      openai(2, 0.5, 8),
	"gpt-4.1-mini": openai(0.4, 0.1, 1.6),
	"gpt-4.1-nano": openai(0.1, 0.025, 0.4),
	"gpt-5":        openai(1.25, 0.125, 10),
	"gpt-5-mini":   openai(0.25, 0.025, 2),
	"gpt-5-nano":   openai(0.05, 0.005, 0.4),
	// Codex's default models: no published price known to this table;
	// gpt-5's until one is set in [models."<id>".price].
	"gpt-5.5":     openai(1.25, 0.125, 10),
	"gpt-6.2-sol": openai(1.25, 0.125, 10),
	"o1":          openai(15, 7.5, 60),
	"o3":          openai(2, 0.5, 8),
	"o3-mini":     openai(1.1, 0.55, 4.4),
	"o4-mini":     openai(1.1, 0.275, 4.4),

	"gpt-oss-20b":            {},
	"gpt-oss-120b":           {},
	"llama-3.1-8b-instruct":  {},
	"llama-3.3-70b-instruct": {},
}

func anthropic(in, out float64) config.Price {
	return config.Price{Input: in, CacheWrite5m: in * 1.25, CacheWrite1h: in * 2, CacheRead: in / 10, Output: out}
}

func openai(in, cached, out float64) config.Price {
	return config.Price{Input: in, CacheWrite5m: in, CacheWrite1h: in, CacheRead: cached, Output: out}
}

// DefaultPrices returns a copy of the built-in price table, keyed by the
// catalog's model ids.
func DefaultPrices() map[string]config.Price { return maps.Clone(defaultPrices) }

// priceCatalog looks a model id up the way config.Config.Model does (an
// exact id, else the id with a date suffix) in the built-in table.
var priceCatalog = func() config.Config {
	c := config.Config{Models: map[string]config.Model{}}
	for id, p := range defaultPrices {
		c.Models[id] = config.Model{Price: &p}
	}
	return c
}()

// PriceOf returns model's price: its [models] entry's price in cfg, else
// the built-in price of the catalog's model of that id (dated ids such as
// "claude-sonnet-4-5-20250929" included). ok is false for a model with
// neither: its entries are counted in tokens, their costs are 0 and
// Totals.Unpriced counts them.
func PriceOf(cfg config.Config, model string) (p config.Price, ok bool) {
	if m, found := cfg.Model(model); found && m.Price != nil {
		return *m.Price, true
	}
	if m, found := priceCatalog.Model(model); found {
		return *m.Price, true
	}
	return config.Price{}, false
}

// USD formats v US dollars to four decimals, as every figure of the
// ledger is shown: "$0.1247", "-$0.0021". A value that rounds to zero is
// "$0.0000", never "-$0.0000".
func USD(v float64) string {
	d := 4
	if math.Round(v*1e4) == 0 && math.Round(v*1e6) != 0 {
		d = 6
	}
	p := math.Pow10(d)
	r := math.Round(v*p) / p
	if r < 0 {
		return fmt.Sprintf("-$%.*f", d, -r)
	}
	return fmt.Sprintf("$%.*f", d, math.Abs(r))
}
