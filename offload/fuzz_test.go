package offload

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/config"
)

// FuzzOffloadRoundTrip: any tool result text round-trips through
// an offload: the file and the artifact hold it byte for byte, the stub is
// valid UTF-8, keeps the exact head and tail, names the artifact exactly once
// (artifacts.FindRefs), and states the exact sizes. Text that is not
// offloaded (short, or invalid UTF-8) comes back unchanged.
func FuzzOffloadRoundTrip(f *testing.F) {
	for _, s := range []string{
		strings.Repeat("line of output\n", 20),
		strings.Repeat("é日本\U0001F600", 40),
		strings.Repeat("x", 101),
		"short",
		strings.Repeat("\xff", 200),
		strings.Repeat("[… 5 characters (5 bytes) omitted …]\n", 10),
		strings.Repeat("artifact://"+strings.Repeat("a", 64)+" ", 5),
	} {
		f.Add(s, uint8(40), uint8(10))
	}
	arts := newArtifacts(f)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text string, head, tail uint8) {
		cfg := config.Offload{Enabled: true, MaxChars: 100, KeepHead: uint64(head % 60), KeepTail: uint64(tail % 39)}
		o := New(cfg, dir, arts, nil)
		in := toolMsg("call-1", "bash", text)
		out, rec := o.Offload(bg, "s", in)
		if rec == nil {
			if out.Content[0].Text != text {
				t.Fatal("a result that was not offloaded changed")
			}
			if utf8.ValidString(text) && uint64(utf8.RuneCountInString(text)) > cfg.MaxChars {
				t.Fatalf("%d characters not offloaded", utf8.RuneCountInString(text))
			}
			return
		}
		stub := out.Content[0].Text
		if !utf8.ValidString(stub) {
			t.Fatal("stub is not valid UTF-8")
		}
		if b, err := os.ReadFile(rec.Path); err != nil || string(b) != text {
			t.Fatalf("file %s does not hold the text: %v", rec.Path, err)
		}
		id, err := artifacts.ParseURI(rec.Artifact)
		if err != nil {
			t.Fatal(err)
		}
		if b, _, err := arts.Get(bg, id); err != nil || string(b) != text {
			t.Fatalf("artifact does not hold the text: %v", err)
		}
		if rec.Bytes != uint64(len(text)) || rec.Chars != uint64(utf8.RuneCountInString(text)) || rec.Lines != CountLines(text) {
			t.Fatalf("record %+v does not measure the text", rec)
		}
		if !strings.Contains(stub, "\n"+Head(text, cfg.KeepHead)+"\n[… ") || !strings.HasSuffix(stub, Tail(text, cfg.KeepTail)+"\n"+stub[strings.LastIndex(stub, "\n")+1:]) {
			t.Fatal("stub does not keep the exact head and tail")
		}
		refs := artifacts.FindRefs([]byte(stub))
		if len(refs) == 0 || refs[0] != id {
			t.Fatalf("stub names %v, want %s first", refs, id)
		}
		if out.Role != in.Role || out.ToolCallID != in.ToolCallID || out.ToolName != in.ToolName || out.IsError != in.IsError || !out.Time.Equal(in.Time) {
			t.Fatal("offload changed the message's identity")
		}
	})
}

// FuzzArtifactMarker: any content's id survives its URI, its reference
// marker and FindRefs.
func FuzzArtifactMarker(f *testing.F) {
	for _, s := range []string{"", "hello", strings.Repeat("\x00", 9), `artifact://zz "quoted"`} {
		f.Add([]byte(s))
	}
	arts := newArtifacts(f)
	f.Fuzz(func(t *testing.T, content []byte) {
		id := arts.IDOf(content)
		if got, err := artifacts.ParseURI(id.URI()); err != nil || got != id {
			t.Fatalf("ParseURI(URI) = %v, %v", got, err)
		}
		if got, err := artifacts.ParseRef(string(id)); err != nil || got != id {
			t.Fatalf("ParseRef(id) = %v, %v", got, err)
		}
		m := artifacts.Marker(id, len(content), artifacts.FormatText)
		if refs := artifacts.FindRefs([]byte(string(content) + m + string(content))); !containsID(refs, id) {
			t.Fatalf("FindRefs lost %s in a marker", id)
		}
	})
}

func containsID(ids []artifacts.ID, id artifacts.ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
