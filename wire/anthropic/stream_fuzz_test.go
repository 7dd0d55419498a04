package anthropic

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ctxd/ctxd/history"
)

// FuzzStreamReader (the proxy's SSE parser): any bytes,
// cut anywhere, never panic the reader; how the stream is cut never changes
// what it rebuilds; and a rebuilt answer's tool calls carry valid JSON
// objects as input.
func FuzzStreamReader(f *testing.F) {
	f.Add([]byte(sseStream), uint8(7))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"), uint8(1))
	f.Add([]byte("data: {\"type\":\"content_block_delta\",\"index\":9,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}\n\n"), uint8(3))
	f.Add([]byte(": comment\r\ndata: not json\r\n\r\n"), uint8(2))
	f.Fuzz(func(t *testing.T, stream []byte, size uint8) {
		whole := NewStreamReader()
		whole.Write(stream)
		cut := NewStreamReader()
		step := int(size%64) + 1
		for i := 0; i < len(stream); i += step {
			cut.Write(stream[i:min(i+step, len(stream))])
		}
		rw, errW := whole.Response()
		rc, errC := cut.Response()
		if (errW == nil) != (errC == nil) {
			t.Fatalf("cutting changed the outcome: %v vs %v", errW, errC)
		}
		if errW != nil {
			return
		}
		mw, mc := rw.Message(), rc.Message()
		if !reflect.DeepEqual(mw, mc) {
			t.Fatalf("cutting changed the message:\n%+v\n%+v", mw, mc)
		}
		for _, b := range mw.Content {
			if b.Type != history.BlockToolCall {
				continue
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(b.Input, &obj); err != nil {
				t.Fatalf("tool call %q input %q is not a JSON object: %v", b.ID, b.Input, err)
			}
		}
	})
}
