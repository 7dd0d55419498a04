package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadEvents(t *testing.T) {
	long := strings.Repeat("é", 100_000) // a line longer than the reader's buffer
	tests := []struct {
		name     string
		stream   string
		want     []Event
		wantLast uint64
	}{
		{
			name:     "one event",
			stream:   "id: 1\nevent: message\ndata: {\"seq\":1,\"kind\":\"message\",\"time\":\"2025-01-01T00:00:00Z\"}\n\n",
			want:     []Event{{Seq: 1, Kind: EventMessage, Time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}},
			wantLast: 1,
		},
		{
			name: "multi-line data, comments, retry, CRLF",
			stream: ": heartbeat\r\nretry: 1000\r\nid: 2\r\nevent: offload\r\ndata: {\"seq\":2,\r\ndata:  \"kind\":\"offload\",\r\n" +
				": ping in the middle\r\ndata: \"data\":{\"bytes\":5}}\r\n\r\n: ping\r\n\r\n",
			want:     []Event{{Seq: 2, Kind: EventOffload, Data: []byte(`{"bytes":5}`)}},
			wantLast: 2,
		},
		{
			name:     "kind and seq from the SSE fields when the data lacks them",
			stream:   "id: 3\nevent: circuit_open\ndata: {\"data\":{\"failures\":3}}\n\n",
			want:     []Event{{Seq: 3, Kind: EventCircuitOpen, Data: []byte(`{"failures":3}`)}},
			wantLast: 3,
		},
		{
			name:     "event without data is not dispatched; field without colon",
			stream:   "id: 4\nevent: message\n\ndata\n\nevent: diagnostic\ndata:{\"seq\":5}\n\n",
			want:     []Event{{Seq: 5, Kind: EventDiagnostic}},
			wantLast: 5,
		},
		{
			name:     "partial event at EOF discarded",
			stream:   "data: {\"seq\":6}\n\ndata: {\"seq\":7}\n",
			want:     []Event{{Seq: 6}},
			wantLast: 6,
		},
		{
			name:     "long line",
			stream:   "id: 8\ndata: {\"seq\":8,\"kind\":\"message\",\"message\":{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"" + long + "\"}]}}\n\n",
			want:     []Event{{Seq: 8, Kind: EventMessage, Message: &Message{Role: RoleTool, Content: []Block{{Type: BlockText, Text: long}}}}},
			wantLast: 8,
		},
		{
			name:   "empty stream",
			stream: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Event
			last, err := readEvents(strings.NewReader(tt.stream), func(e Event) error {
				got = append(got, e)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if last != tt.wantLast {
				t.Errorf("last = %d, want %d", last, tt.wantLast)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReadEventsStops(t *testing.T) {
	stream := "data: {\"seq\":1}\n\ndata: {\"seq\":2}\n\ndata: {\"seq\":3}\n\n"
	stop := errors.New("enough")
	var n int
	_, err := readEvents(strings.NewReader(stream), func(e Event) error {
		n++
		if e.Seq == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Errorf("err %v after %d events, want %v after 2", err, n, stop)
	}

	_, err = readEvents(strings.NewReader("event: error\ndata: {\"error\":{\"code\":\"not_found\",\"message\":\"session \\\"s\\\" was deleted\"}}\n\n"),
		func(Event) error { t.Error("fn called"); return nil })
	if ErrorCode(err) != NotFound || err.Error() != `session "s" was deleted` {
		t.Errorf("error event: %v (%s)", err, ErrorCode(err))
	}

	_, err = readEvents(strings.NewReader("data: {not json\n\n"), func(Event) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "decode event") {
		t.Errorf("bad data: %v", err)
	}
}

// sseServer serves events 1..n of session "s1" from the requested seq, then
// either returns (no follow) or, when follow=true and hold is set, keeps
// the stream open with heartbeats until the client leaves.
func sseServer(t *testing.T, n int, hold bool) (string, chan string) {
	queries := make(chan string, 10)
	mux := http.NewServeMux()
	mux.HandleFunc(RouteEvents, func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.RawQuery
		if r.PathValue(PathValueID) != "s1" {
			w.Header().Set("Content-Type", ContentTypeJSON)
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"code":"not_found","message":"no session %q"}}`, r.PathValue(PathValueID))
			return
		}
		if r.Header.Get("Accept") != ContentTypeEventStream {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", ContentTypeEventStream)
		from := 1
		fmt.Sscan(r.URL.Query().Get(QueryFrom), &from)
		fl := w.(http.Flusher)
		for seq := max(from, 1); seq <= n; seq++ {
			fmt.Fprintf(w, "id: %d\nevent: message\ndata: {\"seq\":%d,\"kind\":\"message\"}\n\n", seq, seq)
			fl.Flush()
		}
		if r.URL.Query().Get(QueryFollow) != "true" || !hold {
			return
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				fmt.Fprint(w, ": ping\n\n")
				fl.Flush()
			}
		}
	})
	return serveUnix(t, mux), queries
}

func TestStreamEventsBacklog(t *testing.T) {
	p, queries := sseServer(t, 5, false)
	c := &Client{Socket: p}
	var seqs []uint64
	err := c.StreamEvents(context.Background(), "s1", EventsOptions{From: 3}, func(e Event) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seqs, []uint64{3, 4, 5}) {
		t.Errorf("seqs %v", seqs)
	}
	if q := <-queries; q != "from=3" {
		t.Errorf("query %q", q)
	}

	err = c.StreamEvents(context.Background(), "nope", EventsOptions{}, func(Event) error { return nil })
	if ErrorCode(err) != NotFound {
		t.Errorf("unknown session: %v (%s)", err, ErrorCode(err))
	}
}

func TestEventsFollowEndsWithResumePoint(t *testing.T) {
	p, queries := sseServer(t, 4, false)
	c := &Client{Socket: p}
	var n int
	err := c.Events(context.Background(), "s1", 2, func(Event) error { n++; return nil })
	if ErrorCode(err) != Unavailable || !strings.Contains(err.Error(), "resume from seq 5") || n != 3 {
		t.Errorf("got %v (%s) after %d events", err, ErrorCode(err), n)
	}
	if q := <-queries; q != "follow=true&from=2" {
		t.Errorf("query %q", q)
	}
}

func TestEventsStopsOnFnError(t *testing.T) {
	p, _ := sseServer(t, 10, true)
	c := &Client{Socket: p}
	stop := errors.New("stop here")
	var n int
	err := c.Events(context.Background(), "s1", 0, func(e Event) error {
		n++
		if e.Seq == 3 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Errorf("got %v after %d events, want the fn's error itself after 3", err, n)
	}
}

func TestEventsStopsOnContextCancel(t *testing.T) {
	p, _ := sseServer(t, 2, true)
	c := &Client{Socket: p}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n int
	err := c.Events(ctx, "s1", 0, func(e Event) error {
		n++
		if e.Seq == 2 {
			// The server now holds the stream open with heartbeats only:
			// cancelling must end the wait.
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 2 {
		t.Errorf("got %v after %d events, want context.Canceled after 2", err, n)
	}
}
