package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// TestLatency200k reports p50/p99 latency of an append and of a context read
// (pre-send check included) over the socket for a session holding about
// 200,000 tokens. It is a measurement, not a
// check: run it with CTXD_LATENCY=1 (and without -race).
func TestLatency200k(t *testing.T) {
	if os.Getenv("CTXD_LATENCY") == "" {
		t.Skip("set CTXD_LATENCY=1 to measure")
	}
	e := newEnv(t, baseConfig)
	e.start(t)
	c := e.client()
	ctx := context.Background()
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{ID: "big", Model: "local", ContextLimit: 1_000_000, System: "latency",
		Config: "[context_compaction]\nauto = false\n"}); err != nil {
		t.Fatal(err)
	}
	word := strings.Fields("the daemon keeps every session inside the window with offloading context editing and compaction go func err nil return")
	para := func(i, n int) string {
		var b strings.Builder
		for j := 0; b.Len() < n; j++ {
			b.WriteString(word[(i*7+j)%len(word)])
			b.WriteByte(' ')
		}
		return b.String()
	}
	for batch := 0; ; batch++ {
		var msgs []api.Message
		for i := range 40 {
			role := api.RoleUser
			if i%2 == 1 {
				role = api.RoleAssistant
			}
			msgs = append(msgs, api.Message{Role: role, Content: []api.Block{{Type: api.BlockText, Text: para(batch*40+i, 4000)}}})
		}
		if _, err := c.AppendMessages(ctx, "big", api.AppendMessagesRequest{Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		cr, err := c.ContextWith(ctx, "big", api.ContextOptions{NoPreSend: true})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := c.GetSession(ctx, "big")
		if s.Tokens.Value >= 200_000 {
			t.Logf("session: %d tokens (%s), %d messages, context body %d bytes", s.Tokens.Value, s.Tokens.Source, s.Messages, len(cr))
			break
		}
	}
	measure := func(name string, n int, f func(i int) error) {
		d := make([]time.Duration, n)
		for i := range n {
			start := time.Now()
			if err := f(i); err != nil {
				t.Fatal(err)
			}
			d[i] = time.Since(start)
		}
		slices.Sort(d)
		t.Logf("%-28s n=%d p50=%v p99=%v max=%v", name, n, d[n/2], d[n*99/100], d[n-1])
	}
	measure("append (1 message)", 300, func(i int) error {
		role := api.RoleUser
		if i%2 == 1 {
			role = api.RoleAssistant
		}
		_, err := c.AppendMessages(ctx, "big", api.AppendMessagesRequest{Messages: []api.Message{{Role: role, Content: []api.Block{{Type: api.BlockText, Text: fmt.Sprint("short message ", i)}}}}})
		return err
	})
	for _, f := range []string{api.FormatCanonical, api.FormatAnthropic, api.FormatOpenAI} {
		measure("context "+f, 100, func(int) error {
			_, err := c.ContextRaw(ctx, "big", f)
			return err
		})
	}
}
