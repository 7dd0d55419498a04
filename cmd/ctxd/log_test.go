package main

import (
	"bufio"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/redact"
	"github.com/ctxd/ctxd/internal/syncbuf"
)

// logRecords decodes the JSON log lines written to buf.
func logRecords(t *testing.T, buf *syncbuf.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not one JSON record: %q", line)
		}
		out = append(out, rec)
	}
	return out
}

// waitForRecord polls buf until a record whose msg contains want appears.
func waitForRecord(t *testing.T, buf *syncbuf.Buffer, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, rec := range logRecords(t, buf) {
			if msg, _ := rec["msg"].(string); strings.Contains(msg, want) {
				return rec
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no log record with %q; the log:\n%s", want, buf.String())
	return nil
}

// TestUnsolicitedResponseIsARecord: an upstream that sends bytes on an
// idle keep-alive connection makes net/http's Transport print "Unsolicited
// response received on idle HTTP channel…" through the standard log
// package; the daemon's capture makes it a warn record of its own logger,
// redacted, and nothing else reaches stderr. Restoring puts the previous
// output back.
func TestUnsolicitedResponseIsARecord(t *testing.T) {
	var buf syncbuf.Buffer
	logger := newLogger(&buf, "json", slog.LevelInfo, redact.New())
	before := log.Writer()
	restore := captureStdLog(logger)
	defer func() {
		if err := restore(); err != nil {
			t.Error(err)
		}
		if log.Writer() != before {
			t.Error("the standard logger's output was not restored")
		}
	}()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sent := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		<-sent // the client has read the answer: the connection is idle
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nx-api-key: sk-ant-api03-unsolicitedSecretValue0123456789\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
	}()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(sent)

	rec := waitForRecord(t, &buf, "Unsolicited response received on idle HTTP channel")
	if rec["level"] != "WARN" || rec[attrOrigin] != "go log" {
		t.Errorf("record %v: want level WARN and origin %q", rec, "go log")
	}
	if strings.Contains(buf.String(), "unsolicitedSecretValue") {
		t.Errorf("the echoed key reached the log:\n%s", buf.String())
	}
}

// TestHTTPServerErrorLogIsARecord: what net/http's server logs itself (a
// panic in a handler) is a warn record naming the listener, not a bare
// line.
func TestHTTPServerErrorLogIsARecord(t *testing.T) {
	var buf syncbuf.Buffer
	logger := newLogger(&buf, "json", slog.LevelInfo, redact.New())
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("handler bug")
	}))
	srv.Config.ErrorLog = httpErrorLog(logger, "unix socket")
	srv.Start()
	defer srv.Close()
	if resp, err := http.Get(srv.URL); err == nil {
		resp.Body.Close()
	}
	rec := waitForRecord(t, &buf, "http: panic serving")
	if rec["level"] != "WARN" || rec[attrOrigin] != "net/http" || rec[attrListener] != "unix socket" {
		t.Errorf("record %v: want level WARN, origin net/http, listener %q", rec, "unix socket")
	}
}

// TestEveryHTTPServerLogsThroughSlog: every http.Server the module's
// non-test code builds sets ErrorLog, so net/http's own lines ("http:
// TLS handshake error", a handler's panic) are slog records, never bare
// lines on stderr: the daemon's listeners (httpErrorLog), the proxy's, the
// load generator's fake provider and the wire replay's.
func TestEveryHTTPServerLogsThroughSlog(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	found := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Server" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "http" {
				return true
			}
			found++
			for _, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "ErrorLog" {
						return true
					}
				}
			}
			t.Errorf("%s: an http.Server without ErrorLog: net/http would print on stderr past slog", fset.Position(lit.Pos()))
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 3 {
		t.Fatalf("found %d http.Server literals: wrong directory?", found)
	}
}
