package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestRedisBoundedLogLimitChange: in every arrangement over a real Redis,
// a node admits 10 requests under a bounded-log limit of 10 per minute and
// pushes them; a second node, on a file where the rule's limit is 100 (the
// same Counter, entry size 5 instead of 1), decides once, syncs and decides
// again. It must see exactly what it sees when the first node's limit was
// 100 too: the count is kept across the change, converted. Centralized
// leaves 88 (the 10 and its own 2 counted); and the first node, still on
// 10, then rejects.
func TestRedisBoundedLogLimitChange(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	low := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 10, Window: time.Minute, Counter: "rule"})
	high := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 100, Window: time.Minute, Tolerance: 0.05, Counter: "rule"})
	for _, arr := range distributed.Arrangements() {
		t.Run(string(arr), func(t *testing.T) {
			// run returns the second node's remaining after its second
			// request, the first node having decided under first.
			run := func(name string, first algorithm.Algorithm) int64 {
				clk := disttest.NewClock()
				node := func(i int) *distributed.Node {
					return mustNode(t, distributed.Options{Arrangement: arr, Nodes: 1, Shared: shared, Clock: clk.Now, ManualSync: true,
						Deadline: time.Second, SyncDeadline: time.Second, ID: fmt.Sprintf("%s-%s-%d", t.Name(), name, i)})
				}
				key := name + "-" + string(arr)
				old := node(0)
				for i := range 10 {
					if d, err := old.DecideOne(ctx, clk.NS(), store.Request{Algorithm: first, Key: key, Cost: 1}); err != nil || !d.Allowed {
						t.Fatalf("%s: request %d: %+v %v", name, i, d, err)
					}
					clk.Add(time.Millisecond)
				}
				old.Sync(ctx)
				raised := node(1)
				// Its first decision makes the key known to it; its sync
				// reads the shared count, converted to its limit.
				if d, err := raised.DecideOne(ctx, clk.NS(), store.Request{Algorithm: high, Key: key, Cost: 1}); err != nil || !d.Allowed {
					t.Fatalf("%s: the second node's first request: %+v %v", name, d, err)
				}
				raised.Sync(ctx)
				d, err := raised.DecideOne(ctx, clk.NS(), store.Request{Algorithm: high, Key: key, Cost: 1})
				if err != nil || !d.Allowed {
					t.Fatalf("%s: the second node's second request: %+v %v", name, d, err)
				}
				raised.Sync(ctx)
				old.Sync(ctx)
				if d, _ := old.DecideOne(ctx, clk.NS(), store.Request{Algorithm: first, Key: key, Cost: 1}); first == low && d.Allowed {
					t.Fatalf("the node on 10 after 12: %+v", d)
				}
				return d.Remaining
			}
			changed, same := run("changed", low), run("same", high)
			if changed != same {
				t.Fatalf("after the change %d left, without it %d", changed, same)
			}
			if arr == distributed.Centralized && changed != 88 {
				t.Fatalf("centralized: %d left, want 88", changed)
			}
			t.Logf("%s: %d left after the change and without it", arr, changed)
		})
	}
}
