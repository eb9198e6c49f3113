package distributed

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDelayedAccountingCoversMeasuredHeap: the table's and the pending
// queue's accounted bytes are not below what the Go heap measures for the
// same keys (one-hit keys of a flood, before and after a sync), so the
// configured bounds bound memory and are not a guess.
func TestDelayedAccountingCoversMeasuredHeap(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Hour})
	clk := disttest.NewClock()
	// The store is in-process and never fails: a minute's sync deadline
	// keeps a stalled machine from turning a slow push into an error.
	n := mustNode(t, Options{Arrangement: Delayed, Shared: newFaultStore(), Clock: clk.Now, ManualSync: true,
		MaxPendingBytes: 1 << 30, MaxBytes: 1 << 30, SyncDeadline: time.Minute})
	const keys = 100000
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()
	for i := range keys {
		if _, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: fmt.Sprintf("tenant=flood-%09d", i), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		measured := heap() - before
		h := n.Health()
		accounted := h.TableBytes + h.PendingBytes
		t.Logf("%s: %d keys, measured %d B/key, accounted %d B/key (table %d, queue %d)", when, h.Keys,
			measured/keys, accounted/keys, h.TableBytes/keys, h.PendingBytes/keys)
		if accounted < measured {
			t.Errorf("%s: accounted %d B/key, below the measured %d B/key", when, accounted/keys, measured/keys)
		}
	}
	check("queued")
	for n.Health().PendingEvents > 0 {
		clk.Add(time.Millisecond)
		if err := n.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("synced")
	runtime.KeepAlive(n)
}
