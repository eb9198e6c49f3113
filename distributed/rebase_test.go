package distributed

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// TestChangedLimitKeepsCount: in every arrangement a node decided 10
// requests under a limit of 10; a reload raises it to 100 (the same rule:
// one Counter): the node's next decision, before any sync, sees the 10,
// and lowered back to 10 it rejects at once.
func TestChangedLimitKeepsCount(t *testing.T) {
	low := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 10, Window: time.Minute, Counter: "rule"})
	high := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 100, Window: time.Minute, Counter: "rule"})
	for _, arr := range Arrangements() {
		t.Run(string(arr), func(t *testing.T) {
			clk := disttest.NewClock()
			n := mustNode(t, Options{Arrangement: arr, Nodes: 1, Shared: memstore.New(memstore.Options{}), Clock: clk.Now,
				ManualSync: true, Deadline: time.Second, ID: fmt.Sprintf("%s-%s", t.Name(), arr)})
			for i := range 10 {
				if d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: low, Key: "k", Cost: 1}); err != nil || !d.Allowed {
					t.Fatalf("request %d under 10: %+v %v", i, d, err)
				}
				clk.Add(time.Millisecond)
			}
			d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: high, Key: "k", Cost: 1})
			if err != nil || !d.Allowed || d.Remaining != 89 {
				t.Fatalf("raised to 100 after 10: %+v %v, want 89 left", d, err)
			}
			if d, _ := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: low, Key: "k", Cost: 1}); d.Allowed {
				t.Fatalf("lowered to 10 after 11: %+v", d)
			}
		})
	}
}
