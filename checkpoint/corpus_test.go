package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/history"
	"github.com/ctxd/ctxd/internal/corpustest"
)

// corpusRecords returns the records of a corpus session: the lines of a
// JSONL transcript, or the history entries of a SWE-agent trajectory, each
// byte for byte as in the file. The importers (transcript/) are not used:
// storage must keep any payload intact, whatever its shape.
func corpusRecords(t *testing.T, rel string) [][]byte {
	raw := corpustest.Read(t, rel)
	if strings.HasSuffix(rel, ".traj.json") {
		var traj struct {
			History []json.RawMessage `json:"history"`
		}
		if err := json.Unmarshal(raw, &traj); err != nil {
			t.Fatal(err)
		}
		recs := make([][]byte, len(traj.History))
		for i, h := range traj.History {
			recs[i] = h
		}
		return recs
	}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	if !bytes.Equal(append(bytes.Join(lines, []byte("\n")), '\n'), raw) {
		t.Fatalf("%s does not end with a newline", rel)
	}
	return lines
}

// TestCorpusRoundTrip stores every corpus session twice — each record as
// the verbatim payload of an imported event, and as the text of a message —
// and reads both back byte-identical.
func TestCorpusRoundTrip(t *testing.T) {
	files := []string{
		"claude-code/autocompact-150tools.jsonl",
		"claude-code/v1-167tools-sidechains.jsonl",
		"pi/454tools-2compactions.jsonl",
		"swe-agent/marshmallow-1867.traj.json",
	}
	st := newDiskStore(t, t.TempDir())
	for i, rel := range files {
		t.Run(rel, func(t *testing.T) {
			recs := corpusRecords(t, rel)
			id := fmt.Sprint("corpus-", i)
			create(t, st, id)
			var evs []Event
			for j, r := range recs {
				if !json.Valid(r) {
					t.Fatalf("record %d is not JSON", j)
				}
				role := history.RoleUser
				if j%2 == 1 {
					role = history.RoleAssistant
				}
				evs = append(evs,
					Event{Kind: KindImported, Data: json.RawMessage(r)},
					Event{Kind: KindMessage, Message: &history.Message{Role: role, Content: []history.Block{
						{Type: history.BlockText, Text: string(r)},
						{Type: history.BlockJSON, JSON: json.RawMessage(r)},
					}}})
			}
			// Append in chunks, as an importer would: one append must fit
			// in one transaction.
			for len(evs) > 0 {
				n := min(len(evs), 32)
				if _, err := st.Append(bg, id, evs[:n]); err != nil {
					t.Fatal(err)
				}
				evs = evs[n:]
			}
			var got [][]byte
			err := st.Range(bg, id, 1, func(e Event) error {
				j := int(e.Seq-1) / 2
				switch e.Kind {
				case KindImported:
					got = append(got, e.Data)
					if !bytes.Equal(e.Data, recs[j]) {
						t.Fatalf("record %d: payload changed", j)
					}
				case KindMessage:
					if e.Message.Content[0].Text != string(recs[j]) {
						t.Fatalf("record %d: message text changed", j)
					}
					// A raw JSON block comes back in history's
					// stable encoding: compacted, nothing escaped.
					var want bytes.Buffer
					json.Compact(&want, recs[j])
					if !bytes.Equal(e.Message.Content[1].JSON, want.Bytes()) {
						t.Fatalf("record %d: json block changed", j)
					}
				default:
					t.Fatalf("unexpected %s event", e.Kind)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(recs) {
				t.Fatalf("read back %d records, stored %d", len(got), len(recs))
			}
			if !strings.HasSuffix(rel, ".traj.json") {
				if !bytes.Equal(append(bytes.Join(got, []byte("\n")), '\n'), corpustest.Read(t, rel)) {
					t.Fatal("the file rebuilt from the log differs")
				}
			}
		})
	}
}
