package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/api"
)

// IdleReport is the idle mode's figures: the daemon's memory holding many
// sessions nobody is using.
type IdleReport struct {
	// Sessions is the number created, each with IdleMessages messages.
	Sessions     int `json:"sessions"`
	IdleMessages int `json:"messages_per_session"`
	// CreateSeconds is how long creating and filling them took.
	CreateSeconds float64 `json:"create_seconds"`
	// Baseline is the daemon's memory before the first session,
	// AfterCreate right after the last, Idle after IdleWaitSeconds.
	Baseline    *Memory `json:"baseline,omitempty"`
	AfterCreate *Memory `json:"after_create,omitempty"`
	Idle        *Memory `json:"idle,omitempty"`
	// HeapInuseAfterCreateMiB and HeapInuseIdleMiB are the daemon's Go heap
	// in use (go_memstats_heap_inuse_bytes) at those two moments.
	HeapInuseAfterCreateMiB float64 `json:"heap_inuse_after_create_mib"`
	HeapInuseIdleMiB        float64 `json:"heap_inuse_idle_mib"`
	IdleWaitSeconds         float64 `json:"idle_wait_seconds"`
	// FirstPage is the size of the first page of GET /v1/sessions (the
	// server's default limit) after the wait, FirstPageMillis how long it
	// took.
	FirstPage       int     `json:"first_page"`
	FirstPageMillis float64 `json:"first_page_ms"`
	// Listed is how many sessions paging through GET /v1/sessions returned
	// after that, ListMillis how long it took (it loads no session), and
	// AfterList the daemon's memory right after; all three zero with
	// --idle-list-all=false.
	Listed     int     `json:"listed"`
	ListMillis float64 `json:"list_ms"`
	AfterList  *Memory `json:"after_list,omitempty"`
	// Errors counts failed requests by code.
	Errors map[string]int `json:"errors,omitempty"`
}

// idleMessages is what each idle session holds: a prompt, a tool round
// and an answer with usage.
func idleMessages(i int) []api.Message {
	id := "toolu_idle_" + strconv.Itoa(i)
	return []api.Message{
		{Role: api.RoleUser, Content: []api.Block{{Type: api.BlockText, Text: fmt.Sprintf("Session %d: list the files of the repository.", i)}}},
		{Role: api.RoleAssistant, Content: []api.Block{
			{Type: api.BlockText, Text: "Listing the files."},
			{Type: api.BlockToolCall, ID: id, Name: "bash", Input: json.RawMessage(`{"command":"ls"}`)},
		}, Usage: &api.Usage{InputTokens: 900, OutputTokens: 30}},
		{Role: api.RoleTool, ToolCallID: id, ToolName: "bash", Content: []api.Block{{Type: api.BlockText, Text: "README.md\ngo.mod\nmain.go\nmain_test.go\n"}}},
		{Role: api.RoleAssistant, Content: []api.Block{{Type: api.BlockText, Text: "Four files: a module with one package and its test."}},
			Usage: &api.Usage{InputTokens: 1000, OutputTokens: 20}},
	}
}

// heapMiB reads the daemon's go_memstats_heap_inuse_bytes.
func heapMiB(ctx context.Context, c *api.Client) float64 {
	m, err := c.Metrics(ctx)
	if err != nil {
		return 0
	}
	return round2(metricValues(m, "go_memstats_heap_inuse_bytes")[""] / (1 << 20))
}

func memoryOf(t *target) *Memory {
	if t.d == nil {
		return nil
	}
	m, err := readMemory(t.d.pid())
	if err != nil {
		return nil
	}
	m.RSS, m.PeakRSS, m.RSSAnon, m.RSSFile = round2(m.RSS), round2(m.PeakRSS), round2(m.RSSAnon), round2(m.RSSFile)
	return &m
}

// runIdleMode creates o.idleSessions sessions, o.idleConcurrency at a
// time, then lets the daemon sit for o.idleWait and reads its memory. The
// daemon cannot be made to collect garbage from outside: the wait lets the
// Go runtime's periodic GC and scavenger, and badger's idle work, run.
func runIdleMode(ctx context.Context, o *options, t *target, rep *Report, _ *sampler) error {
	c := t.client()
	ir := &IdleReport{Sessions: o.idleSessions, IdleMessages: len(idleMessages(0)), Baseline: memoryOf(t), Errors: map[string]int{}}
	rep.Idle = ir
	prefix := "idle-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	model := o.model
	if model == "" {
		model = defaultModel
	}
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range o.idleConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.idleSessions || ctx.Err() != nil {
					return
				}
				id := fmt.Sprintf("%s-%05d", prefix, i)
				rctx, cancel := context.WithTimeout(ctx, o.timeout)
				_, err := c.CreateSession(rctx, api.CreateSessionRequest{ID: id, Model: model, ContextLimit: o.contextLimit, System: "You are a coding agent."})
				if err == nil {
					_, err = c.AppendMessages(rctx, id, api.AppendMessagesRequest{Messages: idleMessages(i)})
				}
				cancel()
				if err != nil {
					mu.Lock()
					ir.Errors[api.ErrorCode(err)]++
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	ir.CreateSeconds = round2(time.Since(start).Seconds())
	rep.ElapsedSeconds = ir.CreateSeconds
	ir.AfterCreate = memoryOf(t)
	ir.HeapInuseAfterCreateMiB = heapMiB(ctx, c)

	t0 := time.Now()
	timer := time.NewTimer(o.idleWait)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
		return ctx.Err()
	}
	ir.IdleWaitSeconds = round2(time.Since(t0).Seconds())
	ir.Idle = memoryOf(t)
	ir.HeapInuseIdleMiB = heapMiB(ctx, c)
	fs := time.Now()
	page, err := c.ListSessionsPage(ctx, "", 0)
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	ir.FirstPageMillis = round2(float64(time.Since(fs).Microseconds()) / 1000)
	ir.FirstPage = len(page.Sessions)
	if o.idleListAll {
		ls := time.Now()
		list, err := c.ListSessions(ctx)
		if err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
		ir.ListMillis = round2(float64(time.Since(ls).Microseconds()) / 1000)
		ir.Listed = len(list)
		ir.AfterList = memoryOf(t)
	}
	if first != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("idle: request errors %v; first: %v", ir.Errors, first))
	}
	return nil
}

// QueueFullReport is the queue-full mode's figures: N sessions asking for
// a compaction at once (wait=false) against a small pool and a slow
// summarizer.
type QueueFullReport struct {
	// Requests is the number of compaction requests sent at once.
	Requests int `json:"requests"`
	// Queued were accepted (202 queued); Nothing found nothing to compact;
	// Unavailable were refused with api.Unavailable (the queue is full);
	// Other failed otherwise, by code; Hung got no answer within
	// --request-timeout.
	Queued      int            `json:"queued"`
	Nothing     int            `json:"nothing_to_compact"`
	Unavailable int            `json:"unavailable"`
	Other       map[string]int `json:"other,omitempty"`
	Hung        int            `json:"hung"`
	// MaxMillis is the slowest answer, P50Millis the median: a refusal must
	// be immediate, not a wait for the queue.
	MaxMillis float64 `json:"max_ms"`
	P50Millis float64 `json:"p50_ms"`
	// UnavailableMessage is one refusal's message, as clients see it.
	UnavailableMessage string `json:"unavailable_message,omitempty"`
}

// runQueueFullMode creates o.queueFull sessions with something to compact,
// then has each ask for a compaction (wait=false) at the same moment.
func runQueueFullMode(ctx context.Context, o *options, t *target, rep *Report) error {
	c := t.client()
	n := o.queueFull
	prefix := "qfull-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	model := o.model
	if model == "" {
		model = defaultModel
	}
	for i := range n {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		rctx, cancel := context.WithTimeout(ctx, o.timeout)
		_, err := c.CreateSession(rctx, api.CreateSessionRequest{ID: id, Model: model, ContextLimit: o.contextLimit,
			Config: "[context_compaction]\nauto = false\n"})
		if err == nil {
			_, err = c.AppendMessages(rctx, id, api.AppendMessagesRequest{Messages: idleMessages(i)})
		}
		cancel()
		if err != nil {
			return fmt.Errorf("queue-full: prepare session %s: %w", id, err)
		}
	}
	qr := &QueueFullReport{Requests: n, Other: map[string]int{}}
	rep.QueueFull = qr
	clients := make([]*api.Client, n)
	for i := range clients {
		clients[i] = t.client()
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		lat   []time.Duration
		ready sync.WaitGroup
	)
	gate := make(chan struct{})
	ready.Add(n)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("%s-%04d", prefix, i)
			ready.Done()
			<-gate
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
			defer cancel()
			t0 := time.Now()
			res, err := clients[i].Compact(rctx, id, api.CompactRequest{Reason: api.ReasonManual})
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, d)
			switch {
			case err == nil && res.Status == api.CompactNothing:
				qr.Nothing++
			case err == nil:
				qr.Queued++
			case rctx.Err() != nil:
				qr.Hung++
			case api.ErrorCode(err) == api.Unavailable:
				qr.Unavailable++
				if qr.UnavailableMessage == "" {
					qr.UnavailableMessage = err.Error()
				}
			default:
				qr.Other[api.ErrorCode(err)]++
			}
		})
	}
	ready.Wait()
	close(gate)
	wg.Wait()
	rep.ElapsedSeconds = round2(time.Since(start).Seconds())
	s := summarize(lat)
	qr.MaxMillis, qr.P50Millis = s.Max, s.P50
	if qr.Hung > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("queue-full: %d compaction requests got no answer within %v", qr.Hung, o.timeout))
	}
	if len(qr.Other) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("queue-full: unexpected errors %v", qr.Other))
	}
	if t.d != nil && n > o.workers+o.queue && qr.Unavailable == 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("queue-full: %d requests for %d workers and a queue of %d, yet none was refused", n, o.workers, o.queue))
	}
	return nil
}
