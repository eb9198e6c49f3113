package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// syncOnceList is a batch list of n keys with more events than one script
// call takes, so that it splits into several calls.
func syncOnceList(a algorithm.Algorithm, n int) []store.SyncBatch {
	bs := make([]store.SyncBatch, n)
	for i := range bs {
		evs := make([]store.Event, 1+i%40)
		for j := range evs {
			evs[j] = store.Event{Time: t0, Cost: 1}
		}
		bs[i] = store.SyncBatch{Algorithm: a, Key: fmt.Sprint("once-", i), Events: evs}
	}
	return bs
}

// fresh returns bs with the same events and no states, as a node sends a
// list again.
func fresh(bs []store.SyncBatch) []store.SyncBatch {
	out := make([]store.SyncBatch, len(bs))
	for i, b := range bs {
		out[i] = store.SyncBatch{Algorithm: b.Algorithm, Key: b.Key, Events: b.Events}
	}
	return out
}

func checkSyncOnce(t *testing.T, s *Store) {
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1 << 20, Window: time.Hour})
	id := store.SyncID{Origin: "node-a/1", Seq: 7, Remember: time.Minute}
	list := syncOnceList(a, 600)
	for round := 0; round < 3; round++ {
		bs := fresh(list)
		if err := s.SyncOnce(ctx, t0, id, bs); err != nil {
			t.Fatal(err)
		}
		for i, b := range bs {
			if b.State[1] != int64(len(b.Events)) {
				t.Fatalf("round %d, key %d: count %d, want %d (applied once)", round, i, b.State[1], len(b.Events))
			}
		}
	}
	// An older list from the same origin is a late copy: never applied.
	old := fresh(list[:3])
	if err := s.SyncOnce(ctx, t0, store.SyncID{Origin: "node-a/1", Seq: 6, Remember: time.Minute}, old); err != nil {
		t.Fatal(err)
	}
	if old[0].State[1] != int64(len(old[0].Events)) {
		t.Fatalf("a late copy of an older list was applied: count %d", old[0].State[1])
	}
	// The next list, and another origin, are applied.
	next := fresh(list[:3])
	if err := s.SyncOnce(ctx, t0, store.SyncID{Origin: "node-a/1", Seq: 8, Remember: time.Minute}, next); err != nil {
		t.Fatal(err)
	}
	other := fresh(list[:3])
	if err := s.SyncOnce(ctx, t0, store.SyncID{Origin: "node-b/1", Seq: 8, Remember: time.Minute}, other); err != nil {
		t.Fatal(err)
	}
	if got, want := other[0].State[1], 3*int64(len(list[0].Events)); got != want {
		t.Fatalf("after a new list and another node's: count %d, want %d", got, want)
	}
}

// TestSyncOnceAppliesEachListOnce sends one list (split into several script
// calls) three times under one id: the counts are applied once and every
// reply carries the current state.
func TestSyncOnceAppliesEachListOnce(t *testing.T) {
	checkSyncOnce(t, newStore(t, Options{ClientTime: true}))
}

// TestSyncOnceCluster is TestSyncOnceAppliesEachListOnce on a Redis Cluster,
// where the record of applied calls lives in each call's hash slot.
func TestSyncOnceCluster(t *testing.T) {
	c := sharedCluster(t)
	checkSyncOnce(t, newStore(t, Options{Addrs: c.Addrs()[:1], Cluster: true, ClientTime: true, SlotsPerLimit: 8}))
}

// TestSyncOnceNeedsOrigin checks the id is required.
func TestSyncOnceNeedsOrigin(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	err := s.SyncOnce(context.Background(), t0, store.SyncID{Seq: 1}, []store.SyncBatch{{}})
	if err == nil {
		t.Fatal("SyncOnce without an origin: no error")
	}
}
