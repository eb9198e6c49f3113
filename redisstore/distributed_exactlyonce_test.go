package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// floodDelayed runs a key flood through one delayed node on shared with
// the sync deadline forced short: workers goroutines each decide batches
// of perCall new keys (one hit each) for d. It returns the node, the keys
// and the number of allowed requests. A push carries at most 512 keys (two
// script calls), so that one sent again fits in 64 times the deadline on a
// loaded machine (8,192 keys did not, under -race at load average 20).
func floodDelayed(t *testing.T, shared *redisstore.Store, round, workers, perCall int, d time.Duration) (*distributed.Node, []string, int64) {
	t.Helper()
	n := mustNode(t, distributed.Options{
		Arrangement: distributed.Delayed, Shared: shared, ID: fmt.Sprintf("flood-%d", round),
		Interval: 20 * time.Millisecond, SyncDeadline: 3 * time.Millisecond,
		BreakerCooldown: 20 * time.Millisecond, MaxSyncKeys: 512,
	})
	rule := disttest.CounterRule(t)
	var wg sync.WaitGroup
	fl := startKeyFlood(t, n, rule, fmt.Sprintf("r%d/", round), workers, perCall, time.Now().Add(d), &wg)
	wg.Wait()
	return n, fl.all(), fl.allowed.Load()
}

// redisTotal sums the counts Redis holds for keys, read in one pull.
func redisTotal(t *testing.T, shared *redisstore.Store, keys []string) int64 {
	t.Helper()
	rule := disttest.CounterRule(t)
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
			sum += disttest.Used(rule, b.State, now)
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
		// Close catches up under the same 3 ms deadline: a push that
		// misses it is sent again with twice the time (up to 64 times).
		closeSettled(t, n, time.Minute)
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
	}
	if resends == 0 {
		t.Fatal("no sync was sent again: the short deadline did not bite, the test proves nothing")
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
func (l *ledger) hit(t *testing.T, n *distributed.Node, rule algorithm.Algorithm, wg *sync.WaitGroup, key func() string, running func() bool) {
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
