package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestDashboardLinkOpensTheDashboardOnTCP: against a real daemon with a
// TCP listener, `ctxctl dashboard` prints a one-time link; the dashboard
// refuses a browser without it, and the cookie the link sets opens it.
func TestDashboardLinkOpensTheDashboardOnTCP(t *testing.T) {
	t.Setenv("CTXCTL_TEST_DAEMON_TOKEN", "0123456789abcdef0123456789abcdef-dashboard")
	d := startDaemonConfig(t, "[daemon]\nlisten = \"127.0.0.1:0\"\nauth_token_env = \"CTXCTL_TEST_DAEMON_TOKEN\"\n")
	code, stdout, stderr := d.run(t, "dashboard")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	link := strings.SplitN(stdout, "\n", 2)[0]
	if !strings.HasPrefix(link, "http://127.0.0.1:") || !strings.Contains(link, "/ui/login?code=") || !strings.Contains(stdout, "good once") {
		t.Fatalf("stdout %q", stdout)
	}
	base := link[:strings.Index(link, "/ui/")]
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url, cookie string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := get(base+"/ui/api/sessions", ""); resp.StatusCode != 401 {
		t.Fatalf("the dashboard without the link: %d %s", resp.StatusCode, body)
	}
	resp, _ := get(link, "")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("the link: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	c := resp.Cookies()[0]
	resp, body := get(base+"/ui/api/sessions", c.Name+"="+c.Value)
	var page struct {
		Total *int `json:"total"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &page) != nil || page.Total == nil {
		t.Fatalf("the dashboard with the cookie: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(link, ""); resp.StatusCode != 401 {
		t.Fatalf("the link a second time: %d, want 401", resp.StatusCode)
	}
	code, stdout, _ = d.run(t, "dashboard", "--json")
	var out struct {
		URL, Path string
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil || !strings.HasSuffix(out.URL, out.Path) || out.URL == link {
		t.Fatalf("--json: %d %q", code, stdout)
	}
}
