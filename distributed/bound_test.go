package distributed

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// tableKeys returns how many entries n's table holds.
func tableKeys(n *Node) int {
	held := 0
	for i := range n.table.shards {
		s := &n.table.shards[i]
		s.mu.Lock()
		held += len(s.m)
		s.mu.Unlock()
	}
	return held
}

// TestDelayedTableBoundNeverResetsAVictim: 100 clients at their limit of 5
// per hour and 100 that used 2 of it, then a flood of 20,000 new keys
// through a delayed node whose table holds 1,024 keys. The table stays
// within its bound, the clients are evicted, and when they come back none
// gets more than what it had left (the eviction summary charges them),
// before or after the next sync; after it (the charge gives way to the
// pulled shared count) each has had exactly what it had left.
func TestDelayedTableBoundNeverResetsAVictim(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Hour})
	clk := disttest.NewClock()
	shared := newFaultStore()
	const maxKeys = 1024
	n := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true, MaxKeys: maxKeys})
	decide := func(key string) bool {
		d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	sync := func() {
		clk.Add(time.Millisecond)
		if err := n.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for v := range 200 {
		for range 2 + 3*(v%2) { // odd: at the limit; even: 2 used
			if !decide(fmt.Sprint("victim-", v)) {
				t.Fatalf("victim %d rejected below its limit", v)
			}
		}
	}
	sync()
	falseRejects, most := 0, 0
	for i := range 20000 {
		if !decide(fmt.Sprint("flood-", i)) {
			falseRejects++
		}
		if i%500 == 499 {
			sync()
			most = max(most, tableKeys(n))
		}
	}
	sync()
	h := n.Health()
	t.Logf("flood of 20,000 keys, table bound %d: most held %d, %d evicted, %d light keys rejected early",
		maxKeys, most, n.table.evicted.Load(), falseRejects)
	// Each shard holds its part of the bound; a key decided on but not yet
	// synced cannot be evicted, so a shard may be over by a few.
	if most > maxKeys+numShards*2 {
		t.Fatalf("table held %d keys with a bound of %d", most, maxKeys)
	}
	if n.table.evicted.Load() == 0 {
		t.Fatal("nothing evicted")
	}
	gone := 0
	for v := range 200 {
		s := &n.table.shards[n.table.shardOf(fmt.Sprint("victim-", v))]
		s.mu.Lock()
		if s.get(rule, fmt.Sprint("victim-", v), false, 0) == nil {
			gone++
		}
		s.mu.Unlock()
	}
	// Eviction samples the map, whose order is random: over many runs
	// between 140 and 175 of the 200 go. A hundred is plenty to test.
	t.Logf("%d of 200 clients evicted", gone)
	if gone < 100 {
		t.Fatalf("only %d of 200 clients evicted; the test needs at least half of them gone", gone)
	}
	got := make([]int, 200)
	for round := range 2 {
		over := 0
		for v := range 200 {
			for range 5 {
				if decide(fmt.Sprint("victim-", v)) {
					got[v]++
				}
			}
			if left := 3 * (1 - v%2); got[v] > left {
				over += got[v] - left
			}
		}
		if over != 0 {
			t.Fatalf("round %d: %d requests admitted beyond what evicted clients had left (%+v)", round, over, h)
		}
		sync() // the second round decides on the pulled shared counts
	}
	// The summary may over-charge a returning client (cells shared with
	// flood keys), but only until its key's first pull: by the end of the
	// second round every client has had exactly what it had left.
	short := 0
	for v := range 200 {
		if left := 3 * (1 - v%2); got[v] < left {
			short++
		}
	}
	if short != 0 {
		t.Fatalf("%d clients still short of what they had left after their keys were pulled", short)
	}
}
