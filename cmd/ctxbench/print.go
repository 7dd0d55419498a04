package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// printReport writes rep for a person.
func printReport(w io.Writer, rep *Report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("ctxbench %s — %d CPUs (%s), %s", rep.Mode, rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.GoVersion)
	s := rep.Settings
	switch rep.Mode {
	case "load":
		p("agents %d, rate %g appends/s each (0 = unbounded, %s arrivals), context limit %d, duration %gs, max requests %d",
			s.Agents, s.Rate, s.Arrivals, s.ContextLimit, s.DurationSeconds, s.MaxRequests)
		for _, sc := range s.Scripts {
			p("script %s", sc)
		}
	}
	if !s.External {
		p("summarizer latency %s, context-length %.0f%%, overloaded %.0f%%; workers %d, queue %d",
			s.SummarizerLatency, s.ContextLengthRate*100, s.OverloadedRate*100, s.Workers, s.Queue)
	}
	p("elapsed %.2fs", rep.ElapsedSeconds)
	if l := rep.Load; l != nil {
		p("throughput      %.1f appends/s, %.1f messages/s (%d appends, %d messages, %d context reads, %d sessions)",
			l.AppendsPerSecond, l.MessagesPerSec, l.Appends, l.Messages, l.ContextReads, l.Sessions)
		p("append          p50 %.2f ms  p99 %.2f ms  max %.2f ms", l.Append.P50, l.Append.P99, l.Append.Max)
		p("context         p50 %.2f ms  p99 %.2f ms  max %.2f ms", l.Context.P50, l.Context.P99, l.Context.Max)
		p("at a compaction p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d context reads)", l.Crossing.P50, l.Crossing.P99, l.Crossing.Max, l.CrossingReads)
		p("prepared        %d summaries: %d used, %d extended, %d unused, %d ready at the end", l.Prepared.Made, l.Prepared.Used, l.Prepared.Extended, l.Prepared.Unused, l.Prepared.Pending)
		p("context reads   %d over the window, %d served uncompacted (compaction queued behind others)", l.ContextOverWindow, l.ContextQueuedBehind)
		p("compactions     ok %d, stalled %d, failed %d (pruned retry %d)", l.Compactions.OK, l.Compactions.Stalled, l.Compactions.Failed, l.Compactions.PrunedRetry)
		in := l.Integrity
		p("integrity       %d acknowledged in %d sessions: %d lost, %d duplicated, %d reordered, %d at another seq, %d unacknowledged",
			in.Acknowledged, in.Sessions, in.Lost, in.Duplicated, in.Reordered, in.SeqMismatch, in.Unacknowledged)
		if len(l.Errors) > 0 {
			p("errors          %v (first: %s)", l.Errors, l.FirstError)
		}
	}
	if ir := rep.Idle; ir != nil {
		p("idle sessions   %d × %d messages, created in %.1fs", ir.Sessions, ir.IdleMessages, ir.CreateSeconds)
		mem := func(m *Memory) string {
			if m == nil {
				return "-"
			}
			return fmt.Sprintf("RSS %.1f MiB (anon %.1f, file %.1f; peak %.1f)", m.RSS, m.RSSAnon, m.RSSFile, m.PeakRSS)
		}
		p("memory          baseline %s; after create %s, heap %.1f MiB; after %.0fs idle %s, heap %.1f MiB",
			mem(ir.Baseline), mem(ir.AfterCreate), ir.HeapInuseAfterCreateMiB, ir.IdleWaitSeconds, mem(ir.Idle), ir.HeapInuseIdleMiB)
		if ir.AfterList != nil || ir.Listed > 0 {
			p("list            first page (%d) in %.1f ms; all %d sessions, page by page, in %.1f ms; after it %s",
				ir.FirstPage, ir.FirstPageMillis, ir.Listed, ir.ListMillis, mem(ir.AfterList))
		} else {
			p("list            first page (%d) in %.1f ms (not paged through: --idle-list-all=false)", ir.FirstPage, ir.FirstPageMillis)
		}
	}
	if q := rep.QueueFull; q != nil {
		p("queue full      %d requests: %d queued, %d nothing to compact, %d unavailable, %d hung, other %v; p50 %.2f ms, max %.2f ms",
			q.Requests, q.Queued, q.Nothing, q.Unavailable, q.Hung, q.Other, q.P50Millis, q.MaxMillis)
		if q.UnavailableMessage != "" {
			p("refusal         %s", q.UnavailableMessage)
		}
	}
	p("queue depth     min %d avg %.2f max %d (%d samples); workers busy max %d", rep.Queue.Min, rep.Queue.Avg, rep.Queue.Max, rep.Queue.Samples, rep.Busy.Max)
	if m := rep.Memory; m != nil {
		p("daemon memory   RSS %.1f MiB (peak %.1f), Go heap in use %.1f MiB", m.RSS, m.PeakRSS, rep.HeapInuseMiB)
	} else {
		p("daemon memory   Go heap in use %.1f MiB", rep.HeapInuseMiB)
	}
	if len(rep.CompactionsMetrics) > 0 {
		keys := make([]string, 0, len(rep.CompactionsMetrics))
		for k := range rep.CompactionsMetrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %.0f", k, rep.CompactionsMetrics[k])
		}
		p("metrics         ctxd_compactions_total: %s", strings.Join(parts, ", "))
	}
	if pr := rep.Provider; pr != nil {
		p("fake provider   %d calls: %d ok, %d context-length, %d overloaded", pr.Calls, pr.Success, pr.ContextLength, pr.Overloaded)
	}
	if rep.OK {
		p("PASS")
	} else {
		p("FAIL")
		for _, pb := range rep.Problems {
			p("  %s", pb)
		}
	}
}
