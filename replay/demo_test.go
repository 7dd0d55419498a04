package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/config"
	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/transcript"
)

// DemoPath is the demonstration session the README's first command replays:
// a Claude Code session (current JSONL format) written for ctxd, long enough
// to trigger an offload, context-edit passes and a compaction with the
// embedded defaults.
const DemoPath = "../testdata/demo/claude-code-session.jsonl"

var updateDemo = flag.Bool("update-demo", false, "regenerate "+DemoPath)

func TestDemoSessionReplaysWithDefaults(t *testing.T) {
	if *updateDemo {
		if err := os.MkdirAll(filepath.Dir(DemoPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(DemoPath, demoSession(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(DemoPath)
	if err != nil {
		t.Fatalf("%v (regenerate with go test ./replay -run Demo -update-demo)", err)
	}
	if !bytes.Equal(data, demoSession()) {
		t.Fatalf("%s is not what the generator writes: regenerate with go test ./replay -run Demo -update-demo", DemoPath)
	}
	tr, err := transcript.Import(bytes.NewReader(data), transcript.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != transcript.FormatClaudeCode {
		t.Fatalf("format %s", tr.Format)
	}
	r, err := Run(context.Background(), tr, Options{Config: config.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("demo: %d responses, %d compactions, %d passes (%d deferred), %d offloads, final %d tokens", r.Responses, len(r.Compactions), r.ContextEditPasses, r.ContextEditDeferred, r.Offloads, r.FinalTokens)
	// A pass shows as fired or as deferred: the demo's would not pay for
	// its cache rewrite before the compaction that follows it.
	if len(r.Compactions) == 0 || r.Offloads == 0 || r.ContextEditPasses+int(r.ContextEditDeferred) == 0 {
		t.Fatalf("the demo must show every layer: %d compactions, %d offloads, %d passes, %d deferred", len(r.Compactions), r.Offloads, r.ContextEditPasses, r.ContextEditDeferred)
	}
	checkClean(t, r)
}

// demo writes the lines of a Claude Code session.
type demo struct {
	rng     *rand.Rand
	buf     bytes.Buffer
	parent  string
	n       int
	clock   time.Time
	est     history.Estimator
	context uint64 // tokens of the context so far, as the provider counts
	pending uint64 // tokens appended since the last response
	tool    int
}

const (
	demoSessionID = "5f0c1d2e-7a8b-4c9d-8e1f-2a3b4c5d6e7f"
	demoModel     = "claude-sonnet-4-5-20250929"
	demoSystem    = 14200 // tokens of Claude Code's system prompt and tools
	demoFactor    = 1.3   // Claude tokens per o200k token
)

func demoSession() []byte {
	d := &demo{rng: rand.New(rand.NewPCG(7, 11)), clock: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC), context: demoSystem}
	d.user("The nightly reconciliation job failed again (third night in a row). Here is the full job log:\n\n```\n" + d.jobLog(700, "reconcile") + "```\n\nFind out why it fails and fix it. Keep the fix small.")
	d.respond("I'll start by running the test suite to see what is already failing.", "", d.call("Bash", map[string]any{"command": "go test ./... 2>&1", "description": "Run the test suite"}, d.testOutput(300, true)))
	d.respond("", "The failing test is TestReconcileResumesFromCursor. Let me read the job and the cursor store.",
		d.call("Read", map[string]any{"file_path": "/home/dev/ledger/reconcile/job.go"}, d.source("reconcile", 420)),
		d.call("Read", map[string]any{"file_path": "/home/dev/ledger/reconcile/cursor.go"}, d.source("cursor", 380)))
	d.respond("", "", d.call("Grep", map[string]any{"pattern": "ErrStaleCursor", "path": "/home/dev/ledger"}, "reconcile/cursor.go:41:var ErrStaleCursor = errors.New(\"reconcile: stale cursor\")\nreconcile/job.go:212:\t\tif errors.Is(err, ErrStaleCursor) {\nreconcile/job_test.go:88:\tif !errors.Is(err, ErrStaleCursor) {\n"))
	d.respond("", "", d.call("Read", map[string]any{"file_path": "/home/dev/ledger/reconcile/batch.go"}, d.source("batch", 400)))
	d.respond("The job resumes from the cursor it saved before the batch was committed, so after a crash between the commit and the cursor write the same batch is reconciled twice and the second pass sees every entry as a duplicate. That is what the log shows at 02:14. I need the payments side to confirm.", "", nil)
	d.user("That matches what I saw. Here is the payments-service log from the same window:\n\n```\n" + d.jobLog(650, "payments") + "```")
	d.respond("", "The payments log confirms two commits of batch 4821. Let me look at how the ledger writes the cursor.",
		d.call("Read", map[string]any{"file_path": "/home/dev/ledger/store/tx.go"}, d.source("tx", 450)),
		d.call("Read", map[string]any{"file_path": "/home/dev/ledger/store/cursor_store.go"}, d.source("cursorstore", 380)))
	d.respond("", "", d.call("Bash", map[string]any{"command": "go test ./reconcile/ -run Cursor -v 2>&1", "description": "Run the cursor tests verbosely"}, d.testOutput(250, true)))
	d.user("Also, here is the design note for the cursor protocol, in case it helps:\n\n" + d.designDoc(900))
	d.respond("", "The design note says the cursor must be written in the same transaction as the batch. job.go writes it after. I'll move the cursor write into the batch transaction.",
		d.call("Edit", map[string]any{"file_path": "/home/dev/ledger/reconcile/job.go", "old_string": "\tif err := j.cursors.Save(ctx, next); err != nil {", "new_string": "\tif err := tx.SaveCursor(ctx, next); err != nil {"}, "The file /home/dev/ledger/reconcile/job.go has been updated."))
	d.respond("", "", d.call("Bash", map[string]any{"command": "go test ./... 2>&1", "description": "Run the test suite again"}, d.testOutput(320, false)))
	d.user("Before you go on: here is last week's incident timeline from the on-call channel, so the fix covers the earlier failures too.\n\n```\n" + d.jobLog(750, "oncall") + "```")
	d.respond("", "The earlier incidents are the same double commit. I'll add a regression test that crashes between the commit and the cursor write.",
		d.call("Read", map[string]any{"file_path": "/home/dev/ledger/reconcile/job_test.go"}, d.source("jobtest", 420)))
	d.respond("", "", d.call("Edit", map[string]any{"file_path": "/home/dev/ledger/reconcile/job_test.go", "old_string": "func TestReconcileResumesFromCursor(t *testing.T) {", "new_string": "func TestReconcileCrashBetweenCommitAndCursor(t *testing.T) {\n\t// ...\n}\n\nfunc TestReconcileResumesFromCursor(t *testing.T) {"}, "The file /home/dev/ledger/reconcile/job_test.go has been updated."))
	d.respond("", "", d.call("Bash", map[string]any{"command": "go test -race ./reconcile/ 2>&1", "description": "Run the reconcile tests with the race detector"}, d.testOutput(200, false)))
	d.user("Great. One more data point from the database team, the slow-query log during the failure:\n\n```\n" + d.jobLog(600, "db") + "```\nDoes this change anything?")
	d.respond("No: the slow queries are the duplicate inserts the double commit caused, so they disappear with the fix. I'll check the whole suite once more.", "", d.call("Bash", map[string]any{"command": "go vet ./... && go test ./... 2>&1", "description": "Vet and test everything"}, d.testOutput(280, false)))
	d.respond("The fix is in place: reconcile/job.go now writes the cursor inside the batch transaction (store.Tx.SaveCursor), so a crash can no longer leave a committed batch with an old cursor. The new test TestReconcileCrashBetweenCommitAndCursor reproduces the double commit and passes, and the whole suite passes with -race.", "", nil)
	d.user("Thanks. Please write a short summary for the incident ticket.")
	d.respond("Incident summary: the nightly reconciliation job saved its resume cursor after committing each batch. When the job was killed between the two writes (the OOM kills at 02:14 on three nights), it resumed from the previous cursor, reconciled the same batch twice and failed on duplicate entries. Fix: the cursor is written in the batch's transaction. Regression test added.", "", nil)
	return d.buf.Bytes()
}

func (d *demo) uuid() string {
	d.n++
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", d.rng.Uint32(), d.n, d.rng.IntN(4096), d.rng.IntN(4096), d.rng.Uint64()&0xffffffffffff)
}

func (d *demo) line(v map[string]any) {
	d.clock = d.clock.Add(time.Duration(3+d.rng.IntN(40)) * time.Second)
	v["isSidechain"] = false
	v["userType"] = "external"
	v["cwd"] = "/home/dev/ledger"
	v["sessionId"] = demoSessionID
	v["version"] = "2.1.39"
	v["gitBranch"] = "fix-reconcile-cursor"
	v["timestamp"] = d.clock.Format("2006-01-02T15:04:05.000Z")
	u := d.uuid()
	v["uuid"] = u
	if d.parent == "" {
		v["parentUuid"] = nil
	} else {
		v["parentUuid"] = d.parent
	}
	d.parent = u
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	d.buf.Write(b)
	d.buf.WriteByte('\n')
}

func (d *demo) tokens(s string) uint64 { return uint64(float64(d.est.Text(s))*demoFactor) + 4 }

func (d *demo) user(text string) {
	d.pending += d.tokens(text)
	d.line(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
}

type demoCall struct {
	id, name string
	input    map[string]any
	result   string
}

func (d *demo) call(name string, input map[string]any, result string) *demoCall {
	d.tool++
	return &demoCall{id: fmt.Sprintf("toolu_01Demo%04dXk%s", d.tool, strings.Repeat("Q", 8)), name: name, input: input, result: result}
}

// respond writes one API response — optional thinking, text, tool calls,
// split over lines sharing message.id as Claude Code writes them — then the
// tool results.
func (d *demo) respond(text, thinking string, first *demoCall, more ...*demoCall) {
	calls := more
	if first != nil {
		calls = append([]*demoCall{first}, more...)
	}
	var blocks []map[string]any
	if thinking != "" {
		blocks = append(blocks, map[string]any{"type": "thinking", "thinking": thinking, "signature": "EqoBCkYIBxgCKkD" + strings.Repeat("x", 40)})
	}
	if text != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": text})
	}
	var out uint64 = 8
	for _, b := range blocks {
		for _, k := range []string{"text", "thinking"} {
			if s, ok := b[k].(string); ok {
				out += d.tokens(s)
			}
		}
	}
	for _, c := range calls {
		in, _ := json.Marshal(c.input)
		out += d.tokens(string(in)) + 20
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input})
	}
	created := d.pending
	usage := map[string]any{"input_tokens": 3, "cache_creation_input_tokens": created, "cache_read_input_tokens": d.context - 3,
		"output_tokens": out, "service_tier": "standard"}
	d.context += created
	d.pending = out // the response is part of the next request
	id := fmt.Sprintf("msg_01Demo%06d", d.n)
	req := fmt.Sprintf("req_011Demo%06d", d.n)
	for i, b := range blocks {
		stop := any(nil)
		if i == len(blocks)-1 {
			stop = "end_turn"
			if len(calls) > 0 {
				stop = "tool_use"
			}
		}
		d.line(map[string]any{"type": "assistant", "requestId": req, "message": map[string]any{
			"model": demoModel, "id": id, "type": "message", "role": "assistant", "content": []any{b},
			"stop_reason": stop, "stop_sequence": nil, "usage": usage}})
	}
	for _, c := range calls {
		d.pending += d.tokens(c.result) + 10
		d.line(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{
			map[string]any{"tool_use_id": c.id, "type": "tool_result", "content": c.result}}}})
	}
}

var (
	demoMerchants = []string{"m_8812", "m_1044", "m_3390", "m_7215", "m_5106", "m_2287"}
	demoLevels    = []string{"INFO", "INFO", "INFO", "DEBUG", "WARN"}
	demoEvents    = []string{"batch started", "entry matched", "entry matched", "entry matched", "settlement fetched", "cursor saved", "batch committed", "retrying fetch", "entry pending"}
)

// jobLog returns n log lines of a service.
func (d *demo) jobLog(n int, svc string) string {
	var b strings.Builder
	t := time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)
	for i := range n {
		t = t.Add(time.Duration(50+d.rng.IntN(900)) * time.Millisecond)
		lvl, ev := demoLevels[d.rng.IntN(len(demoLevels))], demoEvents[d.rng.IntN(len(demoEvents))]
		if i == n*2/3 {
			lvl, ev = "ERROR", "duplicate entry for batch=4821: reconcile: stale cursor"
		}
		fmt.Fprintf(&b, "%s %-5s %s %s batch=%d merchant=%s entry=e_%06d amount=%d.%02d latency_ms=%d\n",
			t.Format("2006-01-02T15:04:05.000Z"), lvl, svc, ev, 4800+i/60, demoMerchants[d.rng.IntN(len(demoMerchants))],
			d.rng.IntN(999999), d.rng.IntN(5000), d.rng.IntN(100), d.rng.IntN(400))
	}
	return b.String()
}

// testOutput returns go test output with n lines, failing or not.
func (d *demo) testOutput(n int, fail bool) string {
	var b strings.Builder
	pkgs := []string{"ledger/api", "ledger/reconcile", "ledger/store", "ledger/payments", "ledger/internal/clock"}
	for i := range n {
		p := pkgs[i%len(pkgs)]
		fmt.Fprintf(&b, "=== RUN   Test%s%d\n--- PASS: Test%s%d (0.%02ds)\n", strings.ReplaceAll(p[7:], "/", "_"), i, strings.ReplaceAll(p[7:], "/", "_"), i, d.rng.IntN(99))
	}
	if fail {
		b.WriteString("--- FAIL: TestReconcileResumesFromCursor (0.04s)\n    job_test.go:88: reconciled batch 4821 twice: reconcile: stale cursor\nFAIL\nFAIL\tledger/reconcile\t1.212s\n")
	} else {
		b.WriteString("PASS\nok  \tledger/reconcile\t1.187s\n")
	}
	return b.String()
}

// source returns a Go source file of about n lines, as Read shows it
// (numbered lines).
func (d *demo) source(name string, n int) string {
	var b strings.Builder
	idents := []string{"ctx", "batch", "cursor", "entry", "tx", "store", "next", "err", "merchant", "amount"}
	for i := 1; i <= n; i++ {
		var line string
		switch i % 9 {
		case 0:
			line = fmt.Sprintf("func (j *%s) step%d(ctx context.Context, %s *Batch) error {", name, i, idents[d.rng.IntN(len(idents))])
		case 1, 5:
			line = fmt.Sprintf("\tif err := j.%s.Load(ctx, %s); err != nil {", idents[d.rng.IntN(len(idents))], idents[d.rng.IntN(len(idents))])
		case 2, 6:
			line = fmt.Sprintf("\t\treturn fmt.Errorf(\"%s: loading %s %%d: %%w\", %s.ID, err)", name, idents[d.rng.IntN(len(idents))], idents[d.rng.IntN(len(idents))])
		case 3, 7:
			line = "\t}"
		case 4:
			line = fmt.Sprintf("\t// %s keeps the %s of the %s until the batch is committed.", idents[d.rng.IntN(len(idents))], idents[d.rng.IntN(len(idents))], idents[d.rng.IntN(len(idents))])
		case 8:
			line = "\treturn nil\n}"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i, line)
	}
	return b.String()
}

// designDoc returns a design note of about n lines.
func (d *demo) designDoc(n int) string {
	var b strings.Builder
	b.WriteString("# Reconciliation cursor protocol\n\n")
	sentences := []string{
		"The cursor names the last ledger entry whose settlement has been reconciled.",
		"A batch and the cursor that follows it must become durable together, in one transaction.",
		"A worker that restarts reads the cursor and resumes with the next entry.",
		"Entries are idempotent by entry id, but the reconciliation report is not.",
		"The settlement feed may deliver an entry late; late entries are reconciled in the next batch.",
		"Batches are at most 500 entries so that a transaction stays under the store's size limit.",
	}
	for i := range n {
		if i%12 == 0 {
			fmt.Fprintf(&b, "\n## Section %d\n\n", i/12+1)
		}
		b.WriteString(sentences[d.rng.IntN(len(sentences))])
		b.WriteByte(' ')
		if i%4 == 3 {
			b.WriteString("\n")
		}
	}
	return b.String()
}
