package history

import "testing"

// TestFirstMessageOpaqueCompaction: a list that opens with the OpenAI
// Responses compaction item (an assistant message starting with an
// opaque compaction) breaks no rule; one opening with any other assistant
// message, or with a compaction that has a text summary, still does.
func TestFirstMessageOpaqueCompaction(t *testing.T) {
	user := Message{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "go on"}}}
	rows := []struct {
		name  string
		first Message
		want  bool
	}{
		{"opaque_compaction", Message{Role: RoleAssistant, Content: []Block{{Type: BlockCompaction, Data: `{"type":"compaction","encrypted_content":"gAAA"}`}}}, false},
		{"text_compaction", Message{Role: RoleAssistant, Content: []Block{{Type: BlockCompaction, Text: "summary"}}}, true},
		{"assistant_text", Message{Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "hi"}}}, true},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			vs := CheckRequest([]Message{row.first, user}, Rules{})
			got := false
			for _, v := range vs {
				if v.Rule == RuleFirstNotUser {
					got = true
				}
			}
			if got != row.want {
				t.Errorf("first_message_not_user: %v, want %v (%v)", got, row.want, vs)
			}
		})
	}
}
