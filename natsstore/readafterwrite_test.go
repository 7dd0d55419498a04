package natsstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/artifacts"
	"github.com/ctxd/ctxd/checkpoint"
	"github.com/ctxd/ctxd/natsstore"
	"github.com/ctxd/ctxd/natsstore/natstest"
)

// pinned opens one node per server of the shared cluster on one prefix,
// node i connected to server i only: a write through one node and a read
// through another then go through different servers, and any read served
// by a replica that has not applied the write yet would miss it.
func pinned(t *testing.T, prefix string) []*natsstore.Store {
	t.Helper()
	c := sharedCluster(t)
	var nodes []*natsstore.Store
	for _, u := range c.URLs() {
		nodes = append(nodes, openOn(t, c, prefix, 3, func(o *natsstore.Options) { o.Servers = []string{u} }))
	}
	return nodes
}

// TestReadAfterWriteAcrossNodes: on the R3 cluster, a write
// acknowledged through one server is seen at once through another, in a
// loop: a session created on node A is listed and counted by node B (and
// no longer listed once deleted), and an artifact of several chunks
// retained through A is read whole through B. Before the fix, listings
// (an ordered consumer placed on any replica) missed the newest session
// and chunked reads ended early with a digest mismatch.
func TestReadAfterWriteAcrossNodes(t *testing.T) {
	ctx := context.Background()
	nodes := pinned(t, newPrefix("raw"))
	secret, err := nodes[0].Secret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var arts []*natsstore.Artifacts
	for _, n := range nodes {
		s, err := n.Secret(ctx)
		if err != nil || !bytes.Equal(s, secret) {
			t.Fatalf("secret through another server: %x %v", s, err)
		}
		a, err := n.Artifacts(s)
		if err != nil {
			t.Fatal(err)
		}
		arts = append(arts, a)
	}
	rounds := 150
	if testing.Short() {
		rounds = 30
	}
	var live []string
	for i := range rounds {
		a, b := i%len(nodes), (i+1)%len(nodes)
		la, lb := nodes[a].Log(), nodes[b].Log()
		id := fmt.Sprintf("s%04d", i)
		if _, err := la.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
		live = append(live, id)
		if i%5 == 4 { // delete an older one through A: B must not list it
			gone := live[0]
			if err := la.DeleteSession(ctx, gone); err != nil {
				t.Fatal(err)
			}
			live = live[1:]
		}
		ids, err := lb.ListSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, live) {
			t.Fatalf("round %d: node %d lists %d sessions %v after node %d's writes; want %d %v", i, b, len(ids), ids, a, len(live), live)
		}
		if n, err := lb.CountSessions(ctx); err != nil || n != len(live) {
			t.Fatalf("round %d: node %d counts %d sessions (%v); want %d", i, b, n, err, len(live))
		}
		if i%3 == 0 {
			// 300 KB: three chunks of the object store.
			content := bytes.Repeat([]byte(fmt.Sprintf("round %d line\n", i)), 300_000/14)
			aid, err := arts[a].Retain(ctx, content, artifacts.FormatText)
			if err != nil {
				t.Fatal(err)
			}
			got, f, err := arts[b].Get(ctx, aid)
			if err != nil || f != artifacts.FormatText || !bytes.Equal(got, content) {
				t.Fatalf("round %d: node %d reads %d of %d bytes (%q, %v) of the artifact node %d retained", i, b, len(got), len(content), f, err, a)
			}
		}
	}
}

// TestDeleteMarkers: a session's delete leaves no subject in the meta
// stream (so the leader's subjects are the live sessions); a delete
// marker left by an older ctxd or a node that stopped mid-delete is not
// listed and is dropped by the listing; a session deleted and created
// again is listed once.
func TestDeleteMarkers(t *testing.T) {
	ctx := context.Background()
	prefix := newPrefix("dm")
	nodes := pinned(t, prefix)
	la, lb := nodes[0].Log(), nodes[1].Log()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := la.CreateSession(ctx, id, checkpoint.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(nodes[2].Conn())
	if err != nil {
		t.Fatal(err)
	}
	bucket := strings.ToUpper(prefix) + "_META"
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	if stream.CachedInfo().Config.AllowDirect {
		t.Fatal("the meta bucket allows direct gets: a Get could be answered by a lagging replica")
	}
	subjects := func() []string {
		t.Helper()
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$KV."+bucket+".m.>"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for s := range info.State.Subjects {
			out = append(out, strings.TrimPrefix(s, "$KV."+bucket+".m."))
		}
		slices.Sort(out)
		return out
	}
	hexOf := func(ids ...string) []string {
		var out []string
		for _, id := range ids {
			out = append(out, hex.EncodeToString([]byte(id)))
		}
		return out
	}
	if err := lb.DeleteSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := subjects(); !slices.Equal(got, hexOf("b", "c")) {
		t.Fatalf("meta subjects after deleting a: %v, want b and c only", got)
	}
	// A marker as an older ctxd left it: the key deleted, not purged.
	if err := kv.Delete(ctx, "m."+hex.EncodeToString([]byte("b"))); err != nil {
		t.Fatal(err)
	}
	if got := subjects(); !slices.Equal(got, hexOf("b", "c")) {
		t.Fatalf("meta subjects with b's marker: %v", got)
	}
	if ids, err := lb.ListSessions(ctx); err != nil || !slices.Equal(ids, []string{"c"}) {
		t.Fatalf("listed %v (%v), want [c]", ids, err)
	}
	if got := subjects(); !slices.Equal(got, hexOf("c")) {
		t.Fatalf("meta subjects after the listing: %v, want c only (b's marker dropped)", got)
	}
	if _, err := lb.CreateSession(ctx, "a", checkpoint.Meta{}); err != nil {
		t.Fatal(err)
	}
	if ids, err := la.ListSessions(ctx); err != nil || !slices.Equal(ids, []string{"a", "c"}) {
		t.Fatalf("listed %v (%v) after a was created again, want [a c]", ids, err)
	}
}

// readsCorrupt reads artifact id, whose chunks were purged out of band,
// through b until it reads as artifacts.ErrCorrupt. A read that a replica
// not yet past the purge answers (an ordered consumer goes to any replica)
// may still give the whole content, which its digest vouches for; any
// other answer — part of the content, another error — fails the test, as
// does no ErrCorrupt within 30 s.
func readsCorrupt(t *testing.T, b *natsstore.Artifacts, id artifacts.ID, whole []byte, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Scale(30*time.Second))
	defer cancel()
	for {
		got, _, err := b.Get(ctx, id)
		if errors.Is(err, artifacts.ErrCorrupt) && got == nil {
			return
		}
		if err != nil || !bytes.Equal(got, whole) {
			t.Fatalf("get with %s: %d bytes, %v; want artifacts.ErrCorrupt", what, len(got), err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("get with %s: still the whole content after %v", what, natstest.Scale(30*time.Second))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestArtifactMissingChunks: an artifact whose info is stored but whose
// chunks are not all there (some, or none) reads as corrupt rather than
// as the chunks there are or after an endless wait; intact ones of one
// and of three chunks read whole.
func TestArtifactMissingChunks(t *testing.T) {
	ctx := context.Background()
	prefix := newPrefix("mc")
	nodes := pinned(t, prefix)
	secret, err := nodes[0].Secret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := nodes[0].Artifacts(secret)
	b, _ := nodes[1].Artifacts(secret)
	content := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320 KB, 3 chunks
	id, err := a.Retain(ctx, content, artifacts.FormatText)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nodes[2].Conn())
	if err != nil {
		t.Fatal(err)
	}
	bucket := strings.ToUpper(prefix) + "_ARTIFACTS"
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, string(id))
	if err != nil || info.Chunks < 2 {
		t.Fatalf("info: %+v %v", info, err)
	}
	stream, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	if stream.CachedInfo().Config.AllowDirect {
		t.Fatal("the object store allows direct gets: its info could be read from a lagging replica")
	}
	// Keep the first chunk only.
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$O."+bucket+".C."+info.NUID), jetstream.WithPurgeKeep(1)); err != nil {
		t.Fatal(err)
	}
	readsCorrupt(t, b, id, content, "chunks missing")
	// None of its chunks: a consumer read gets nothing at all (no "no more
	// pending" either) and must not wait for ever.
	content2 := bytes.Repeat([]byte("fedcba9876543210"), 20_000)
	id2, err := a.Retain(ctx, content2, artifacts.FormatText)
	if err != nil {
		t.Fatal(err)
	}
	info2, err := obs.GetInfo(ctx, string(id2))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$O."+bucket+".C."+info2.NUID)); err != nil {
		t.Fatal(err)
	}
	readsCorrupt(t, b, id2, content2, "no chunks")
	// The intact ones read whole through the consumer path (3 chunks) and
	// the leader path (1 chunk).
	for _, c := range [][]byte{bytes.Repeat([]byte("x"), 300_000), []byte("small")} {
		cid, err := a.Retain(ctx, c, artifacts.FormatText)
		if err != nil {
			t.Fatal(err)
		}
		if got, _, err := b.Get(ctx, cid); err != nil || !bytes.Equal(got, c) {
			t.Fatalf("intact artifact of %d bytes: read %d, %v", len(c), len(got), err)
		}
	}
}
