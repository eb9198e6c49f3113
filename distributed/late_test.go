package distributed

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// waitLateAnswers waits until n has counted want late answers.
func waitLateAnswers(t *testing.T, n *Node, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Health().SyncLateAnswers < want {
		if time.Now().After(deadline) {
			t.Fatalf("late answers %d, want %d: %+v", n.Health().SyncLateAnswers, want, n.Health())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDelayedSlowStoreKeepsBreakerClosed: a store that answers every sync
// after its deadline (busy with a flood's pushes) is slow, not down: each
// late answer counts as a successful exchange, so the breaker, which opens
// after 2 failures in a row here, stays closed through 6 late syncs in a
// row, and the node stays Up (the readiness probe's test). A store that
// answers nothing opens it as before, and its first late answer closes it.
func TestDelayedSlowStoreKeepsBreakerClosed(t *testing.T) {
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true,
		SyncDeadline: 20 * time.Millisecond, BreakerFailures: 2})
	for i := range 6 {
		if _, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: "k", Cost: 1}); err != nil {
			t.Fatal(err)
		}
		clk.Add(200 * time.Millisecond)
		shared.startStall()
		if err := n.Sync(ctx); err == nil {
			t.Fatalf("sync %d on a stalled store: no error", i)
		}
		shared.endStall() // the abandoned call answers, late
		waitLateAnswers(t, n, uint64(i+1))
		if h := n.Health(); h.BreakerOpen || !h.Up {
			t.Fatalf("late sync %d opened the breaker of a store that answers: %+v", i, h)
		}
	}
	clk.Add(200 * time.Millisecond)
	if err := n.Sync(ctx); err != nil {
		t.Fatalf("sync after the slow ones: %v", err)
	}
	if got := disttest.SharedCount(t, shared.inner, count, "k", clk.NS()); got != 6 {
		t.Fatalf("shared count %d, want the 6 accepted, each once", got)
	}

	// A store that answers nothing is down: the breaker opens.
	shared.startStall()
	for i := 0; !n.Health().BreakerOpen; i++ {
		if i == 5 {
			t.Fatalf("breaker still closed after %d syncs on a store that answers nothing: %+v", i, n.Health())
		}
		n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: "k", Cost: 1})
		clk.Add(200 * time.Millisecond)
		if err := n.Sync(ctx); err == nil {
			t.Fatal("sync on a stalled store: no error")
		}
	}
	late := n.Health().SyncLateAnswers
	shared.endStall()
	waitLateAnswers(t, n, late+1)
	if h := n.Health(); h.BreakerOpen {
		t.Fatalf("the store answered (late) but the breaker is still open: %+v", h)
	}
}
