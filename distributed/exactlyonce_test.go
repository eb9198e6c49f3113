package distributed

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// floodDelayed runs a key flood through one delayed node on shared with
// the sync deadline forced short: workers goroutines each decide batches
// of perCall new keys (one hit each) for d. It returns the node, the keys
// and the number of allowed requests.
func floodDelayed(t *testing.T, shared *redisstore.Store, round, workers, perCall int, d time.Duration) (*Node, []string, int64) {
	t.Helper()
	n := mustNode(t, Options{
		Arrangement: Delayed, Shared: shared, ID: fmt.Sprintf("flood-%d", round),
		Interval: 20 * time.Millisecond, SyncDeadline: 3 * time.Millisecond,
		BreakerCooldown: 20 * time.Millisecond,
	})
	rule := counterRule(t)
	var wg sync.WaitGroup
	fl := startKeyFlood(t, n, rule, fmt.Sprintf("r%d/", round), workers, perCall, time.Now().Add(d), &wg)
	wg.Wait()
	return n, fl.all(), fl.allowed.Load()
}

// redisTotal sums the counts Redis holds for keys, read in one pull.
func redisTotal(t *testing.T, shared *redisstore.Store, keys []string) int64 {
	t.Helper()
	rule := counterRule(t)
	var sum int64
	for len(keys) > 0 {
		// Small parts, each read again if the store's 1 s timeout passes
		// on a busy machine: a read without events changes nothing.
		part := keys[:min(len(keys), 512)]
		keys = keys[len(part):]
		bs := make([]store.SyncBatch, len(part))
		for i, k := range part {
			bs[i] = store.SyncBatch{Algorithm: rule, Key: k}
		}
		now := time.Now().UnixNano()
		var err error
		for try := 0; try < 5; try++ {
			if err = shared.Sync(context.Background(), now, bs); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("reading the counts: %v", err)
		}
		for _, b := range bs {
			sum += used(rule, b.State, now)
		}
	}
	return sum
}

// TestRedisDelayedFloodCountsOnce floods one delayed node with new keys (16
// goroutines, 64 new keys per call, one hit each) while its sync deadline
// is 3 ms, so syncs time out after Redis applied them and are sent again.
// Once nothing is pending, Redis's total equals the node's allowed count
// exactly, five rounds in a row.
func TestRedisDelayedFloodCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, false)
	var resends uint64
	for round := range 5 {
		n, keys, allowed := floodDelayed(t, shared, round, 16, 64, 500*time.Millisecond)
		// Let the node catch up with a deadline it can meet.
		n.syncMu.Lock()
		n.syncDL = 5 * time.Second
		n.syncMu.Unlock()
		deadline := time.Now().Add(30 * time.Second)
		for {
			n.syncMu.Lock()
			settled := n.out == nil && n.pending.Load() == 0
			n.syncMu.Unlock()
			if settled {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: still %d events pending after 30 s: %+v", round, n.pending.Load(), n.Health())
			}
			time.Sleep(20 * time.Millisecond)
		}
		h := n.Health()
		total := redisTotal(t, shared, keys)
		t.Logf("round %d: %d keys, %d allowed, Redis total %d; %d resends, %d store errors, %d merged, %d dropped",
			round, len(keys), allowed, total, h.SyncResends, h.StoreErrors, h.MergedEvents, h.DroppedEvents)
		if h.DroppedEvents != 0 {
			t.Fatalf("round %d: %d events dropped with a 64 MiB queue", round, h.DroppedEvents)
		}
		if total != allowed {
			t.Fatalf("round %d: Redis holds %d for %d allowed requests", round, total, allowed)
		}
		resends += h.SyncResends
		n.Close(ctx)
	}
	if resends == 0 {
		t.Fatal("no sync was sent again: the short deadline did not bite, the test proves nothing")
	}
}

// TestPendingQueueBound fills a small pending queue: a queued key's new
// requests merge into its last event, a new key's count waits on its
// entry (deferred) and is pushed by a later sync once the queue has room,
// so the shared store gets every count. Only an owing key that the table
// evicts before then loses its count, counted as dropped.
func TestPendingQueueBound(t *testing.T) {
	count := counterRule(t)
	clk := newVClock()
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
	if got := sharedCount(t, shared.inner, count, "k3", clk.NS()); got != 6 {
		t.Fatalf("k3: shared count %d, want 6 (one event and five merged)", got)
	}
	if got := sharedCount(t, shared.inner, count, "zz", clk.NS()); got != 2 {
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
	count := counterRule(t)
	clk := newVClock()
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
		if got := sharedCount(t, shared.inner, count, k, clk.NS()); got != 1 {
			t.Fatalf("%s: shared count %d after Close, want 1", k, got)
		}
	}
}

// A ledger counts, per key, the requests a node allowed, for comparing
// with what the shared store ends up holding.
type ledger struct {
	mu sync.Mutex
	ok map[string]int64
}

// hit decides one request on key every 2 ms until running reports false,
// counting the allowed ones. The caller has added one to wg.
func (l *ledger) hit(t *testing.T, n *Node, rule algorithm.Algorithm, wg *sync.WaitGroup, key func() string, running func() bool) {
	defer wg.Done()
	for running() {
		k := key()
		d, err := n.DecideOne(context.Background(), time.Now().UnixNano(), store.Request{Algorithm: rule, Key: k, Cost: 1})
		if err != nil {
			t.Error(err)
			return
		}
		if d.Allowed {
			l.mu.Lock()
			l.ok[k]++
			l.mu.Unlock()
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// check requires every key's count in shared to equal its allowed count.
func (l *ledger) check(t *testing.T, shared *redisstore.Store) {
	var want, got int64
	for key, a := range l.ok {
		g := redisTotal(t, shared, []string{key})
		want, got = want+a, got+g
		switch {
		case g > a:
			t.Errorf("ledger %s: Redis holds %d for %d allowed (a count applied twice)", key, g, a)
		case g < a:
			t.Errorf("ledger %s: Redis holds %d for %d allowed", key, g, a)
		}
	}
	t.Logf("ledger: %d keys, %d allowed, Redis total %d", len(l.ok), want, got)
}
