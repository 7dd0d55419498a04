package proxy

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/ctxd/ctxd/server"
)

// gathered returns the value of a counter, or the sample count of a
// histogram, of the fixture's registry with the given labels (0: none).
func gathered(t *testing.T, f *fixture, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// The proxy's counters on /metrics (docs/design.md §10): requests by api and
// outcome, upstream status classes, overflow retries, bytes streamed and
// the added latency; they survive a restart on the same registry.
func TestProxyMetrics(t *testing.T) {
	f := newFixture(t, testConfig())
	c := longConversation(f, 6, 300, nil)
	// longConversation sent 6 managed requests, each streamed.
	anth := map[string]string{"api": "anthropic"}
	if got := gathered(t, f, server.MetricProxyRequests, map[string]string{"api": "anthropic", "outcome": "managed"}); got != 6 {
		t.Errorf("managed requests %v, want 6", got)
	}
	if got := gathered(t, f, server.MetricProxyUpstream, map[string]string{"api": "anthropic", "class": "2xx"}); got < 6 {
		t.Errorf("upstream 2xx %v, want ≥ 6", got)
	}
	if got := gathered(t, f, server.MetricProxyStreamedBytes, anth); got < 100 {
		t.Errorf("streamed bytes %v", got)
	}
	if got := gathered(t, f, server.MetricProxyAddedLatency, anth); got != 6 {
		t.Errorf("added latency samples %v, want 6", got)
	}
	// An overflow recovered: one 4xx upstream, one retry.
	f.restart()
	f.up.script(reply{status: 400, body: overflowBody(t, "anthropic_400_prompt_too_long_with_request_id_1")}, textAnswer("fixed"))
	if resp, _ := f.post(c.body(), nil); resp.StatusCode != 200 {
		t.Fatalf("overflow: %d", resp.StatusCode)
	}
	if got := gathered(t, f, server.MetricProxyOverflowRetries, map[string]string{"api": "anthropic", "outcome": "retried"}); got != 1 {
		t.Errorf("overflow retries %v, want 1", got)
	}
	if got := gathered(t, f, server.MetricProxyUpstream, map[string]string{"api": "anthropic", "class": "4xx"}); got != 1 {
		t.Errorf("upstream 4xx %v, want 1", got)
	}
	if got := gathered(t, f, server.MetricProxyAddedLatency, anth); got != 7 {
		t.Errorf("added latency samples %v, want 7 (the retry is not ctxd's time)", got)
	}
	// Refused, and an endpoint ctxd does not manage.
	f.post(c.body(), map[string]string{"Origin": "http://evil.example"})
	if got := gathered(t, f, server.MetricProxyRequests, map[string]string{"api": "anthropic", "outcome": "refused"}); got != 1 {
		t.Errorf("refused %v, want 1", got)
	}
	f.up.script(reply{status: 200, body: `{"data":[]}`})
	req, _ := http.NewRequest("GET", f.url+"/v1/models", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := gathered(t, f, server.MetricProxyRequests, map[string]string{"api": "other", "outcome": "passed_through"}); got != 1 {
		t.Errorf("passed through %v, want 1", got)
	}
	// No session id or credential in any label.
	mfs, _ := f.reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v := lp.GetValue(); strings.HasPrefix(v, "p-") || strings.Contains(v, testKey) {
					t.Errorf("%s label %s=%q", mf.GetName(), lp.GetName(), v)
				}
			}
		}
	}
}
