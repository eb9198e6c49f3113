package distributed

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestPendingQueueBound fills a small pending queue: a queued key's new
// requests merge into its last event, a new key's count waits on its
// entry (deferred) and is pushed by a later sync once the queue has room,
// so the shared store gets every count. Only an owing key that the table
// evicts before then loses its count, counted as dropped.
func TestPendingQueueBound(t *testing.T) {
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	shared := newFaultStore()
	// Room for 10 one-event keys of 2 bytes: 10*(16+64+2) = 820.
	n := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true, MaxPendingBytes: 820})
	decide := func(n *Node, key string) {
		d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: key, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", key, d, err)
		}
	}
	for i := range 10 {
		decide(n, fmt.Sprintf("k%d", i))
	}
	for range 5 {
		decide(n, "k3") // full: merged into k3's event
	}
	decide(n, "zz") // full, nothing queued for zz: owed on its entry
	decide(n, "zz")
	h := n.Health()
	if h.PendingBytes != 820 || h.MergedEvents != 5 || h.DeferredEvents != 2 || h.DroppedEvents != 0 || h.PendingEvents != 11 {
		t.Fatalf("health after filling the queue: %+v", h)
	}
	for range 2 { // the first frees the queue, the second pushes zz
		clk.Add(100 * time.Millisecond)
		if err := n.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := disttest.SharedCount(t, shared.inner, count, "k3", clk.NS()); got != 6 {
		t.Fatalf("k3: shared count %d, want 6 (one event and five merged)", got)
	}
	if got := disttest.SharedCount(t, shared.inner, count, "zz", clk.NS()); got != 2 {
		t.Fatalf("zz: shared count %d, want its 2, pushed once the queue had room", got)
	}
	if h := n.Health(); h.PendingBytes != 0 || h.PendingEvents != 0 || h.DroppedEvents != 0 {
		t.Fatalf("after the syncs: %+v", h)
	}

	// One key per shard: a new key in zz's shard evicts it, owed count and all.
	n = mustNode(t, Options{Arrangement: Delayed, Shared: newFaultStore(), Clock: clk.Now, ManualSync: true,
		MaxPendingBytes: 820, MaxKeys: numShards})
	for i := range 10 {
		decide(n, fmt.Sprintf("k%d", i))
	}
	decide(n, "zz")
	clk.Add(time.Millisecond)
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("y", i); n.table.shardOf(k) == n.table.shardOf("zz") {
			other = k
		}
	}
	decide(n, other)
	if h := n.Health(); h.DroppedEvents != 1 || h.DroppedCost != 1 {
		t.Fatalf("an owing key evicted: %+v, want 1 dropped", h)
	}
}

// TestCloseIsBoundedAndHonest: a node whose store hangs closes within its
// context and says how many accepted requests it could not push; once the
// store answers, a node with more keys than one sync carries pushes them
// all in one Close.
func TestCloseIsBoundedAndHonest(t *testing.T) {
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	shared := newFaultStore()
	n, err := New(Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true,
		SyncDeadline: 20 * time.Millisecond, MaxSyncKeys: 300})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: fmt.Sprint("k", i), Cost: 1})
	}
	shared.startStall()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	err = n.Close(cctx)
	took := time.Since(start)
	cancel()
	shared.endStall()
	if err == nil || !strings.Contains(err.Error(), "1000 accepted requests not pushed") {
		t.Fatalf("Close against a hung store: %v", err)
	}
	if took > 2*time.Second {
		t.Fatalf("Close took %v with a 300 ms context", took)
	}

	m := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true, MaxSyncKeys: 300})
	for i := range 1000 {
		m.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: fmt.Sprint("m", i), Cost: 1})
	}
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.Close(cctx); err != nil {
		t.Fatalf("Close with a store that answers: %v", err)
	}
	for _, k := range []string{"m0", "m500", "m999"} {
		if got := disttest.SharedCount(t, shared.inner, count, k, clk.NS()); got != 1 {
			t.Fatalf("%s: shared count %d after Close, want 1", k, got)
		}
	}
}
