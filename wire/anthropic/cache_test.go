package anthropic

import (
	"strings"
	"testing"
)

// TestCacheElementsDropTheMovingMarker: the same message with and without
// the moving cache marker is one element, and the 1-hour lifetime is seen.
func TestCacheElementsDropTheMovingMarker(t *testing.T) {
	a := `{"model":"m","tools":[{"name":"Bash","cache_control":{"type":"ephemeral"}}],"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`
	b := `{"model":"m","system":"s","tools":[{"name":"Bash","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":[{"cache_control":{"type":"ephemeral"},"type":"text","text":"yo"}]}]}`
	ea, la, longA, err := CacheElements([]byte(a))
	if err != nil {
		t.Fatal(err)
	}
	eb, lb, longB, _ := CacheElements([]byte(b))
	if len(ea) != 3 || len(eb) != 4 || la != 2 || lb != 3 || !longA || longB {
		t.Fatalf("elements %d/%d, markers %d/%d, long %v/%v", len(ea), len(eb), la, lb, longA, longB)
	}
	for i := range ea {
		if string(ea[i]) != string(eb[i]) {
			t.Errorf("element %d differs: %s vs %s", i, ea[i], eb[i])
		}
		if strings.Contains(string(ea[i]), "cache_control") {
			t.Errorf("element %d keeps its marker: %s", i, ea[i])
		}
	}
	if string(eb[3]) != `{"role":"assistant","content":[{"type":"text","text":"yo"}]}` {
		t.Errorf("a leading marker left %s", eb[3])
	}
	if _, _, _, err := CacheElements([]byte(`[1]`)); err == nil {
		t.Error("an array is a Messages request")
	}
}

// TestUsageSplitsCacheWritesByLifetime: usage.cache_creation's 5-minute and
// 1-hour writes, in a body (the corpus's shape) and in a stream's
// message_delta.
func TestUsageSplitsCacheWritesByLifetime(t *testing.T) {
	body := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_creation_input_tokens":1331,"cache_read_input_tokens":14874,"cache_creation":{"ephemeral_5m_input_tokens":331,"ephemeral_1h_input_tokens":1000},"output_tokens":3,"service_tier":"standard"}}`
	r, err := DecodeResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	u := r.Message().Usage
	if u == nil || u.CacheCreationInputTokens != 1331 || u.CacheCreation1hInputTokens != 1000 || u.CacheReadInputTokens != 14874 {
		t.Fatalf("usage %+v", u)
	}
	s := NewStreamReader()
	_, _ = s.Write([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":0,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"cache_creation_input_tokens\":70,\"cache_creation\":{\"ephemeral_5m_input_tokens\":20,\"ephemeral_1h_input_tokens\":50},\"output_tokens\":9}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	resp, err := s.Response()
	if err != nil {
		t.Fatal(err)
	}
	if u := resp.Message().Usage; u == nil || u.CacheCreationInputTokens != 70 || u.CacheCreation1hInputTokens != 50 || u.OutputTokens != 9 {
		t.Fatalf("stream usage %+v", u)
	}
}
