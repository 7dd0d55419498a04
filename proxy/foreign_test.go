package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMain lets the test binary act as another local user's agent: with
// CTXD_PROXY_TEST_POST set it posts CTXD_PROXY_TEST_BODY there, prints the
// status and the session, and exits.
func TestMain(m *testing.M) {
	if u := os.Getenv("CTXD_PROXY_TEST_GET"); u != "" {
		resp, err := http.Get(u)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, strings.Contains(string(b), "summary"))
		os.Exit(0)
	}
	if u := os.Getenv("CTXD_PROXY_TEST_POST"); u != "" {
		req, _ := http.NewRequest("POST", u, strings.NewReader(os.Getenv("CTXD_PROXY_TEST_BODY")))
		req.Header.Set("X-Api-Key", testKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get(HeaderSessionID))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestForeignClientGetsNoOffloadStubs: an agent of the daemon's own user
// gets a large tool result offloaded (a stub naming a file in the daemon
// user's directory); an agent running as another local user (here uid
// 65534, when the test runs as root and can start one) gets it whole, as
// that user could not read the file.
func TestForeignClientGetsNoOffloadStubs(t *testing.T) {
	f := newFixture(t, testConfig())
	conv := func(first string) string {
		return newConversation().user(first).assistant(assistantCall("toolu_1", "Bash", `{"command":"cat big"}`)).
			results([2]string{"toolu_1", strings.Repeat("line of output\n", 2000)}).body()
	}
	resp, _ := f.post(conv("own user"), nil)
	reqs := f.up.requests()
	if !strings.Contains(string(reqs[len(reqs)-1].body), "ctxd offloaded this tool result") {
		t.Fatal("the daemon user's own agent: the large result was not offloaded")
	}
	info, _ := f.eng.Session(context.Background(), resp.Header.Get(HeaderSessionID))
	if info.Labels["proxy.client_uid"] != "" {
		t.Fatalf("own user labelled foreign: %v", info.Labels)
	}
	if os.Getuid() != 0 {
		return // starting another user's process needs root
	}
	out := asAnotherUser(t, "CTXD_PROXY_TEST_POST="+f.url+"/v1/messages", "CTXD_PROXY_TEST_BODY="+conv("another user"))
	var status int
	var id string
	if _, err := fmt.Sscan(string(out), &status, &id); err != nil || status != 200 {
		t.Fatalf("another user's agent: %q", out)
	}
	reqs = f.up.requests()
	if got := string(reqs[len(reqs)-1].body); strings.Contains(got, "ctxd offloaded this tool result") || !strings.Contains(got, "line of output") {
		t.Fatal("another user's agent got a stub pointing at the daemon user's files")
	}
	info, _ = f.eng.Session(context.Background(), id)
	if info.Labels["proxy.client_uid"] != "65534" {
		t.Fatalf("labels %v", info.Labels)
	}
}

// asAnotherUser runs this test binary as uid 65534 (the caller runs as
// root) with env, for TestMain's client modes, and returns its output.
func asAnotherUser(t *testing.T, env ...string) []byte {
	t.Helper()
	// The test binary, where the other user can run it.
	dir, err := os.MkdirTemp("", "ctxd-foreign")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "proxy.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("another user's process: %v %s", err, out)
	}
	return out
}

// TestDashboardRefusesAnotherUser: the dashboard on the proxy's loopback
// port shows summaries; another local user's process gets 403, the
// daemon's own user the page.
func TestDashboardRefusesAnotherUser(t *testing.T) {
	f := newFixture(t, testConfig())
	f.p.ui = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "a summary") })
	resp, err := http.Get(f.url + "/ui/api/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the daemon's own user: %d", resp.StatusCode)
	}
	if os.Getuid() != 0 {
		return // starting another user's process needs root
	}
	out := asAnotherUser(t, "CTXD_PROXY_TEST_GET="+f.url+"/ui/api/sessions")
	var status int
	var leaked bool
	if _, err := fmt.Sscan(string(out), &status, &leaked); err != nil || status != http.StatusForbidden || leaked {
		t.Fatalf("another user's GET of the dashboard: %q, want 403 and no summary", out)
	}
}
