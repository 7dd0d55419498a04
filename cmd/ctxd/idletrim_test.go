package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestProxyTrafficDelaysTheIdleTrim: requests served by the proxy's
// handler (as the daemon wraps it) count as activity for the idle memory
// trim: while they come the trim waits, idleTrimAfter after the last one
// it runs once, and not again until more requests were served.
func TestProxyTrafficDelaysTheIdleTrim(t *testing.T) {
	var served atomic.Uint64
	h := countServed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), &served)
	t0 := time.Unix(1_000_000, 0)
	idle := newIdleTrim(&served, t0)
	proxyRequest := func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/messages", nil))
	}
	now := t0
	for i := range 10 {
		proxyRequest()
		now = now.Add(idleTrimCheck)
		if idle.due(now) {
			t.Fatalf("check %d: trimmed while proxy requests were served", i)
		}
	}
	if idle.due(now.Add(idleTrimAfter - time.Millisecond)) {
		t.Fatal("trimmed before idleTrimAfter without a request")
	}
	if !idle.due(now.Add(idleTrimAfter)) {
		t.Fatal("not trimmed idleTrimAfter after the last proxy request")
	}
	if idle.due(now.Add(3 * idleTrimAfter)) {
		t.Fatal("trimmed twice in one idle period")
	}
	proxyRequest()
	later := now.Add(4 * idleTrimAfter)
	if idle.due(later) || !idle.due(later.Add(idleTrimAfter)) {
		t.Fatal("a proxy request after a trim did not start a new idle period")
	}
}
