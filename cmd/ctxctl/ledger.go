package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ctxd/ctxd/api"
)

func sessionLedger(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "ID")
	if err != nil {
		return err
	}
	l, err := e.client(c).Ledger(c.Context, args[0])
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(e.stdout, l)
	}
	writeLedger(e.stdout, l)
	return nil
}

func sessionMode(c *cli.Context, e *env) error {
	args, err := exactArgs(c, "ID", "MODE")
	if err != nil {
		return err
	}
	mode := args[1]
	switch mode {
	case api.ModeEnforce, api.ModeObserve:
	case "default":
		mode = ""
	default:
		return usagef("session mode: %q is not a mode (enforce, observe or default)", args[1])
	}
	if err := e.client(c).SetMode(c.Context, args[0], mode); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "session %s: mode %s\n", args[0], args[1])
	return nil
}

// usd formats US dollars as ledger.USD does: four decimals, six for a
// value under half a hundredth of a cent (its sign agrees with the share
// shown beside it); a value that rounds to zero is "$0.0000", never
// "-$0.0000".
func usd(v float64) string {
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

// causeList is "compaction 1200, growth 300" in the ledger's cause order.
func causeList(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// writeLedger prints a ledger: one row per request or summarizer call, then
// the totals with their denominators named.
func writeLedger(w io.Writer, l *api.LedgerResponse) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tKIND\tMODE\tCLIENT TOK\tSENT TOK\tREAD\tWRITE\tINPUT\tOUTPUT\tPAID\tOTHER SIDE\tCACHE WRITES BY CAUSE")
	for i, en := range l.Entries {
		switch en.Kind {
		case "mode":
			fmt.Fprintf(tw, "%d\tmode\t%s\t\t\t\t\t\t\t\t\t\n", i+1, orDash(en.Mode))
		case "summarizer":
			fmt.Fprintf(tw, "%d\tsummarizer (%s credential)\t%s\t\t\t%d\t%d\t%d\t%d\t%s\t\t\n", i+1, en.Credential, en.Mode,
				en.Reported.CacheRead, en.Reported.CacheWrite5m+en.Reported.CacheWrite1h, en.Reported.Input, en.Reported.Output, usd(en.Cost))
		default:
			kind := "request"
			if en.Cut {
				// The answer broke off: billed for what it reported.
				kind = "request (cut)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", i+1, kind, en.Mode, en.ClientTokens, en.SentTokens,
				en.Reported.CacheRead, en.Reported.CacheWrite5m+en.Reported.CacheWrite1h, en.Reported.Input, en.Reported.Output,
				usd(en.Cost), usd(en.CounterfactualCost), causeList(en.Causes))
		}
	}
	_ = tw.Flush()
	t := l.Totals
	fmt.Fprintln(w)
	if t.Requests > 0 {
		fmt.Fprintf(w, "enforce: %s; without ctxd %s, paid %s, summarizer %s: saved %s (%.1f %% of the %s without ctxd); %d tokens kept out\n",
			count(t.Requests, "request", "requests"), usd(t.WithoutCtxd), usd(t.Paid), usd(t.Summarizer), usd(t.Saved), 100*t.SavedShare, usd(t.WithoutCtxd), t.TokensSaved)
	}
	if t.ObservedRequests > 0 {
		fmt.Fprintf(w, "observe: %s; paid %s as sent, ctxd would have paid %s + summarizer %s: projected saving %s (%.1f %% of the %s paid)\n",
			count(t.ObservedRequests, "request", "requests"), usd(t.Observed), usd(t.Projected), usd(t.ObserveSummarizer), usd(t.ProjectedSaved), 100*t.ProjectedShare, usd(t.Observed))
	}
	if len(t.CacheWrites) > 0 {
		fmt.Fprintf(w, "cache writes by cause (tokens): %s\n", causeList(t.CacheWrites))
	}
	if len(t.ProjectedCacheWrites) > 0 {
		fmt.Fprintf(w, "projected cache writes by cause (tokens): %s\n", causeList(t.ProjectedCacheWrites))
	}
	if t.Unpriced > 0 {
		fmt.Fprintf(w, "%s no price (a model without [models.\"<id>\".price] and not in the catalog): counted at $0\n", count(t.Unpriced, "entry has", "entries have"))
	}
	if t.Uncached > 0 {
		fmt.Fprintf(w, "%s of conversations whose upstream reported no cache use: both sides priced as uncached input (no cache saving claimed)\n", count(t.Uncached, "request", "requests"))
	}
	if t.Cold > 0 {
		fmt.Fprintf(w, "%s read the provider's cache with no earlier request of its session in ctxd's cache model (the first after a restart, or a new branch's first): no saving claimed\n", count(t.Cold, "request", "requests"))
	}
}
