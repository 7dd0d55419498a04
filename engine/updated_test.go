package engine

import (
	"context"
	"testing"
)

// TestUpdatedSurvivesRestart: Info.Updated
// moves with appends and PATCHes, and after a restart both the listing
// (from its row, nothing loaded) and a loaded session report the same time.
func TestUpdatedSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	h := newHarness(t, testConfig(), dir)
	h.create("s1", 50000)
	created, err := h.e.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	h.append("s1", user("hi"), assistant("hello"))
	appended, err := h.e.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !appended.Updated.After(created.Updated) {
		t.Fatalf("append: updated %v, not after %v", appended.Updated, created.Updated)
	}
	system := "be brief"
	patched, err := h.e.UpdateSession(ctx, "s1", Patch{System: &system})
	if err != nil {
		t.Fatal(err)
	}
	if !patched.Updated.After(appended.Updated) {
		t.Fatalf("PATCH: updated %v, not after %v", patched.Updated, appended.Updated)
	}
	h.append("s1", user("again"))
	want, err := h.e.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	h.Close()

	h2 := newHarness(t, testConfig(), dir)
	list := listAll(t, h2.e, 10)
	if len(list) != 1 || list[0].Loaded || !list[0].Updated.Equal(want.Updated) {
		t.Fatalf("listing after restart: %+v; want updated %v from the row", list, want.Updated)
	}
	got, err := h2.e.Session(ctx, "s1")
	if err != nil || !got.Updated.Equal(want.Updated) {
		t.Fatalf("loaded after restart: updated %v, %v; want %v", got.Updated, err, want.Updated)
	}
}
