package proxy

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/internal/store"
)

// BenchmarkHostileBody sends one admitted (or refused) hostile body
// without a credential through ctxd's proxy to an upstream that answers
// 401, as docs/operating.md "Limits" measures on a real daemon, and
// reports the process's peak resident memory added by the request
// (VmHWM, reset before it through /proc/self/clear_refs) as a multiple of
// the body's size (peak-rss-x-body), and the process's CPU time for it
// per MiB of body (cpu-ms/MiB). Sub-benchmarks: text30 (30 MiB of one
// letter), words30 (30 MiB of random short words, text no cache has
// seen), text50 (50 MB: over proxy.limits.body_bytes) and blocks (1M tiny
// content blocks, 25 MiB: over proxy.limits.content_blocks). Linux only.
func BenchmarkHostileBody(b *testing.B) {
	for _, sc := range []struct {
		name string
		body func() []byte
	}{
		{"text30", func() []byte { return hostileText(bytes.Repeat([]byte("x"), 30<<20)) }},
		{"words30", func() []byte { return hostileText(randomWords(30 << 20)) }},
		{"text50", func() []byte { return hostileText(bytes.Repeat([]byte("x"), 50<<20)) }},
		{"blocks", func() []byte {
			blocks := bytes.Repeat([]byte(`{"type":"text","text":"x"},`), 1000000)
			return []byte(`{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":[` + string(blocks[:len(blocks)-1]) + `]}]}`)
		}},
	} {
		b.Run(sc.name, func(b *testing.B) { benchHostile(b, sc.body) })
	}
}

func hostileText(text []byte) []byte {
	return []byte(`{"model":"claude-opus-4-8","max_tokens":10,"messages":[{"role":"user","content":"` + string(text) + `"}]}`)
}

// randomWords is n bytes of random short words (a fixed seed).
func randomWords(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := make([]string, 200000)
	for i := range words {
		w := make([]byte, 3+r.IntN(8))
		for j := range w {
			w[j] = byte('a' + r.IntN(26))
		}
		words[i] = string(w)
	}
	var sb strings.Builder
	sb.Grow(n + 32)
	for sb.Len() < n {
		sb.WriteString(words[r.IntN(len(words))])
		sb.WriteString(words[r.IntN(len(words))])
		sb.WriteByte(' ')
	}
	return []byte(sb.String()[:n])
}

// procStatus reads a kB figure of /proc/self/status in bytes.
func procStatus(b *testing.B, key string) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, key+":") {
			n, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return n * 1024
		}
	}
	b.Skip("no " + key)
	return 0
}

// cpuTime is the process's user and system CPU time.
func cpuTime(b *testing.B) time.Duration {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		b.Skip(err)
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / 100 // USER_HZ
}

func benchHostile(b *testing.B, mk func() []byte) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		_, _ = io.WriteString(w, authError)
	}))
	b.Cleanup(up.Close)
	cfg := config.Defaults()
	cfg.Proxy.Upstreams.Anthropic.BaseURL = up.URL
	db, err := store.Open(filepath.Join(b.TempDir(), "db"), store.Options{SyncWrites: cfg.Storage.SyncWrites})
	if err != nil {
		b.Fatal(err)
	}
	p := benchProxyOn(b, cfg, nil, db)
	hs := httptest.NewServer(p.Handler())
	b.Cleanup(hs.Close)
	body := mk()
	var worst, cpuPerMiB float64
	status := 0
	for range b.N {
		debug.FreeOSMemory()
		before := procStatus(b, "VmRSS")
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			b.Skip("cannot reset the peak RSS:", err)
		}
		c0 := cpuTime(b)
		req, _ := http.NewRequest("POST", hs.URL+"/v1/messages", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		status = resp.StatusCode
		if err := p.WaitRecords(b.Context()); err != nil {
			b.Fatal(err)
		}
		peak := procStatus(b, "VmHWM")
		worst = max(worst, (peak-before)/float64(len(body)))
		cpuPerMiB = max(cpuPerMiB, float64(cpuTime(b)-c0)/float64(time.Millisecond)/(float64(len(body))/(1<<20)))
	}
	b.ReportMetric(worst, "peak-rss-x-body")
	b.ReportMetric(cpuPerMiB, "cpu-ms/MiB")
	b.ReportMetric(float64(len(body))/(1<<20), "body-MiB")
	b.ReportMetric(float64(status), "status")
	runtime.KeepAlive(body)
	_ = fmt.Sprint()
}
