package distributed

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestCloseRepushesAfterStoreLoss: a delayed node whose store lost its data
// (a restart without persistence) finds it at Close and pushes again the
// counts of every key it holds before returning, though they take several
// pushes (MaxSyncKeys 300, 1,000 keys): Close stopping after the first
// push again left 700 keys at zero in the store.
func TestCloseRepushesAfterStoreLoss(t *testing.T) {
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true, MaxSyncKeys: 300})
	const keys = 1000
	for i := range keys {
		if d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: fmt.Sprint("k", i), Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("k%d: %+v %v", i, d, err)
		}
	}
	for n.Health().PendingEvents > 0 {
		clk.Add(time.Millisecond)
		if err := n.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	shared.wipe()
	clk.Add(time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if h := n.Health(); h.RepushPending != 0 || h.RepushSkipped != 0 {
		t.Fatalf("health after Close: %+v, want every key pushed again", h)
	}
	lost := 0
	for i := range keys {
		if disttest.SharedCount(t, shared.inner, count, fmt.Sprint("k", i), clk.NS()) != 1 {
			lost++
		}
	}
	if lost != 0 {
		t.Fatalf("%d of %d keys not back in the store after Close", lost, keys)
	}
}
