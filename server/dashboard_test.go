package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxd/ctxd/api"
)

// uiStub stands for package ui: it answers "dashboard <path>".
var uiStub = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "dashboard "+r.URL.Path)
})

// login opens a dashboard link without following its redirect and
// returns the response.
func login(t *testing.T, f *fixture, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := f.ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestDashboardOnTCPNeedsTheToken: on the daemon's TCP listener every
// dashboard path is refused without the bearer token or the cookie a
// one-time link sets; the link is minted only by an authenticated client,
// is good once and not past its lifetime; the cookie is HttpOnly,
// SameSite=Strict, opens the dashboard only (never the API), and keeps the
// listener's other checks (Origin, Host); a forged cookie is refused.
func TestDashboardOnTCPNeedsTheToken(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).UnixNano())
	f := newFixture(t, func(o *Options) {
		o.UI, o.Listen = uiStub, "0.0.0.0:7421"
		o.Now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	noAuth := map[string]string{"Authorization": ""}
	for _, p := range []string{"/ui", "/ui/", "/ui/assets/app.js", "/ui/api/sessions", "/ui/api/totals", "/ui/api/events", "/ui/api/sessions/x"} {
		if code, e, _, _ := f.do(t, http.MethodGet, p, "", noAuth); code != 401 || e.Code != api.Unauthorized || !strings.Contains(e.Message, "ctxctl dashboard") {
			t.Errorf("GET %s without the token: %d %+v, want 401 naming ctxctl dashboard", p, code, e)
		}
		if code, _, _, _ := f.do(t, http.MethodGet, p, "", map[string]string{"Authorization": "Bearer wrong-token"}); code != 401 {
			t.Errorf("GET %s with a wrong token: %d, want 401", p, code)
		}
	}
	if code, _, body, _ := f.do(t, http.MethodGet, "/ui/api/sessions", "", nil); code != 200 || string(body) != "dashboard /ui/api/sessions" {
		t.Fatalf("with the bearer token: %d %s", code, body)
	}

	// Links are minted by an authenticated client only.
	if code, _, _, _ := f.do(t, http.MethodPost, api.DashboardLinksPath, "", noAuth); code != 401 {
		t.Fatalf("a link without the token: %d, want 401", code)
	}
	link, err := f.client.DashboardLink(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link.URL, "http://127.0.0.1:7421/ui/login?code=") || !strings.HasSuffix(link.URL, link.Path) || !link.Expires.Equal(time.Unix(0, now.Load()).Add(api.DashboardLinkTTL)) {
		t.Fatalf("link %+v", link)
	}
	if r := login(t, f, "/ui/login?code=nope", nil); r.StatusCode != 401 || len(r.Cookies()) != 0 {
		t.Fatalf("a made-up code: %d, cookies %v", r.StatusCode, r.Cookies())
	}
	if r := login(t, f, link.Path, map[string]string{"Origin": "http://evil.example"}); r.StatusCode != 403 || len(r.Cookies()) != 0 {
		t.Fatalf("a link opened from a web page: %d, cookies %v", r.StatusCode, r.Cookies())
	}
	// A HEAD (a link preview) neither logs in nor spends the code.
	head, err := f.ts.Client().Head(f.ts.URL + link.Path)
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	if head.StatusCode != http.StatusMethodNotAllowed || len(head.Cookies()) != 0 || head.Header.Get("Allow") != "GET" {
		t.Fatalf("HEAD of the link: %d, cookies %v, Allow %q; want 405 and no cookie", head.StatusCode, head.Cookies(), head.Header.Get("Allow"))
	}
	r := login(t, f, link.Path, nil)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/ui/" || len(r.Cookies()) != 1 {
		t.Fatalf("the link: %d → %q, cookies %v", r.StatusCode, r.Header.Get("Location"), r.Cookies())
	}
	c := r.Cookies()[0]
	if c.Name != "ctxd_dashboard" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui" || c.MaxAge <= 0 || strings.Contains(link.Path, c.Value) {
		t.Fatalf("cookie %+v", c)
	}
	if r := login(t, f, link.Path, nil); r.StatusCode != 401 {
		t.Fatalf("the link a second time: %d, want 401 (good once)", r.StatusCode)
	}
	cookie := map[string]string{"Authorization": "", "Cookie": c.Name + "=" + c.Value}
	for _, p := range []string{"/ui/", "/ui/api/sessions", "/ui/api/events"} {
		if code, _, body, _ := f.do(t, http.MethodGet, p, "", cookie); code != 200 || string(body) != "dashboard "+p {
			t.Errorf("GET %s with the cookie: %d %s", p, code, body)
		}
	}
	for _, p := range []string{"/v1/sessions", "/v1/status", "/metrics"} {
		if code, _, _, _ := f.do(t, http.MethodGet, p, "", cookie); code != 401 {
			t.Errorf("GET %s with the dashboard cookie only: %d, want 401 (the cookie is not the token)", p, code)
		}
	}
	refused := map[string]map[string]string{
		"Origin":  {"Origin": "http://evil.example"},
		"Referer": {"Referer": "http://evil.example/page"},
		"Host":    {"Host": "evil.example:7421"},
	}
	for what, h := range refused {
		h["Authorization"], h["Cookie"] = "", cookie["Cookie"]
		if code, _, _, _ := f.do(t, http.MethodGet, "/ui/api/sessions", "", h); code != 403 {
			t.Errorf("the cookie with a foreign %s: %d, want 403", what, code)
		}
	}
	if code, _, _, _ := f.do(t, http.MethodPost, "/ui/api/sessions", "{}", cookie); code != 405 {
		t.Errorf("POST with the cookie: %d, want 405 (read-only)", code)
	}
	if code, _, _, _ := f.do(t, http.MethodGet, "/ui/", "", map[string]string{"Authorization": "", "Cookie": c.Name + "=" + strings.Repeat("0", len(c.Value))}); code != 401 {
		t.Errorf("a forged cookie: %d, want 401", code)
	}

	// A code past its lifetime is refused; a cookie past its own too.
	late, err := f.client.DashboardLink(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now.Add(int64(api.DashboardLinkTTL + time.Second))
	if r := login(t, f, late.Path, nil); r.StatusCode != 401 {
		t.Fatalf("an expired link: %d, want 401", r.StatusCode)
	}
	now.Add(int64(uiCookieTTL))
	if code, _, _, _ := f.do(t, http.MethodGet, "/ui/", "", cookie); code != 401 {
		t.Errorf("an expired cookie: %d, want 401", code)
	}
}

// TestDashboardAbsent: a daemon without a dashboard answers its paths
// not_found and refuses links.
func TestDashboardAbsent(t *testing.T) {
	f := newFixture(t, nil)
	if code, _, _, _ := f.do(t, http.MethodGet, "/ui/", "", nil); code != 404 {
		t.Errorf("GET /ui/: %d, want 404", code)
	}
	if code, e, _, _ := f.do(t, http.MethodPost, api.DashboardLinksPath, "", nil); code != 503 || e.Code != api.Unavailable {
		t.Errorf("a link: %d %+v, want 503", code, e)
	}
}
