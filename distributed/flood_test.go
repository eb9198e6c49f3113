package distributed

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDelayedFloodAndWipeKeepLedgerExact: one delayed node under a flood of
// one-hit keys larger than its table and faster than its pushes, with 50
// ledger keys hit again and again, and the shared store wiped halfway (a
// restart without persistence). The flood's keys are evicted (their
// counts orphaned and pushed later), but every ledger count reaches the store exactly once, the
// table stays within its bound, and a wiped key's view never drops.
func TestDelayedFloodAndWipeKeepLedgerExact(t *testing.T) {
	ledger := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100000000, Window: 8760 * time.Hour})
	flood := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Hour})
	clk := disttest.NewClock()
	shared := newFaultStore()
	const maxBytes = 2 << 20
	const wipeAt = 200
	// The store is in-process and never fails: a minute's sync deadline
	// keeps a stalled machine from turning a slow push into an error.
	n := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true,
		MaxSyncKeys: 256, MaxBytes: maxBytes, SyncDeadline: time.Minute})
	allowed := map[string]int64{}
	rng := rand.New(rand.NewPCG(1, 2))
	fk := 0
	for round := range 400 {
		for range 300 {
			fk++
			if _, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: flood, Key: fmt.Sprint("f", fk), Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		for range 50 {
			key := fmt.Sprint("l", rng.IntN(50))
			d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: ledger, Key: key, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed[key]++
			}
		}
		if round == wipeAt {
			shared.wipe()
		}
		clk.Add(10 * time.Millisecond)
		if err := n.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var want, got int64
	for key, a := range allowed {
		want += a
		g := disttest.SharedCount(t, shared.inner, ledger, key, clk.NS())
		got += g
	}
	h := n.Health()
	t.Logf("ledger: %d allowed, %d in the store; flood %d keys, %d orphaned, %d evicted, table %d keys %d bytes, kept views %d, repush skipped %d",
		want, got, fk, h.OrphanedEvents, h.Evictions, h.Keys, h.TableBytes, h.KeptViews, h.RepushSkipped)
	if got != want {
		t.Errorf("ledger: the store holds %d counts for %d allowed", got, want)
	}
	if h.TableBytes > maxBytes+maxBytes/10 {
		t.Errorf("table %d bytes, over its bound %d", h.TableBytes, maxBytes)
	}
}
