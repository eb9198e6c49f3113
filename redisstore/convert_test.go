package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDifferentialLimitChanges decides random traffic on a few keys with
// limits of one Counter that differ in their limits (and a bucket's rate,
// capacity or burst), switching at random between them as a reload, a
// SetLimit or nodes of two configurations would, on Redis and on the
// memory store: every decision must be equal, so the script converts a
// key's state exactly as ConvertFrom does (and a sliding window whose
// limit crosses 2^16 keeps its counts).
func TestDifferentialLimitChanges(t *testing.T) {
	ctx := context.Background()
	families := map[string][]algorithm.Config{
		"fixed-window": {
			{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second},
			{Algorithm: algorithm.FixedWindow, Limit: 40, Window: time.Second},
		},
		"weighted-window": {
			{Algorithm: algorithm.WeightedWindow, Limit: 6, Window: time.Second},
			{Algorithm: algorithm.WeightedWindow, Limit: 30, Window: time.Second},
		},
		"sliding-window": {
			{Algorithm: algorithm.SlidingWindow, Limit: 8, Window: time.Second, Slices: 4},
			{Algorithm: algorithm.SlidingWindow, Limit: 70000, Window: time.Second, Slices: 4},
		},
		"gcra": {
			{Algorithm: algorithm.GCRA, Limit: 5, Window: time.Second},
			{Algorithm: algorithm.GCRA, Limit: 50, Window: time.Second, Burst: 7},
		},
		"token-bucket": {
			{Algorithm: algorithm.TokenBucket, Limit: 4, Window: time.Second},
			{Algorithm: algorithm.TokenBucket, Limit: 40, Window: time.Second, Capacity: 10, Rate: 25},
		},
		"bounded-log": {
			{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1},
			{Algorithm: algorithm.BoundedLog, Limit: 300, Window: time.Second},
		},
		"bounded-log with holds": {
			{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1, Holds: 4, HoldTTL: time.Second},
			{Algorithm: algorithm.BoundedLog, Limit: 300, Window: time.Second, Holds: 4, HoldTTL: time.Second},
		},
		"bounded-log, one m": {
			{Algorithm: algorithm.BoundedLog, Limit: 40, Window: time.Second, Tolerance: 0.1},
			{Algorithm: algorithm.BoundedLog, Limit: 45, Window: time.Second, Tolerance: 0.1},
		},
		"leaky-bucket": {
			{Algorithm: algorithm.LeakyBucket, Limit: 5, Window: time.Second},
			{Algorithm: algorithm.LeakyBucket, Limit: 20, Window: time.Second, MaxDelay: 2 * time.Second},
		},
	}
	for name, cfgs := range families {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, Options{ClientTime: true})
			mem := memstore.New(memstore.Options{})
			var algs []algorithm.Algorithm
			for _, c := range cfgs {
				c.Counter = "changing"
				algs = append(algs, mustAlg(t, c))
			}
			if !s.KeepsCounts(algs[0]) || counterOf(algs[0]) != counterOf(algs[1]) {
				t.Fatalf("the limits of one counter do not share Redis keys")
			}
			rng := rand.New(rand.NewPCG(3, 9))
			now := t0
			cur := 0
			for step := range 1500 {
				now += int64(rng.IntN(40)) * int64(time.Millisecond)
				if rng.IntN(25) == 0 {
					cur = 1 - cur
				}
				key := []string{"x", "y"}[rng.IntN(2)]
				req := store.Request{Algorithm: algs[cur], Key: key, Cost: 1 + rng.Int64N(max(3, algs[cur].Config().Limit/4))}
				want, err := mem.DecideOne(ctx, now, req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.DecideOne(ctx, now, req)
				if err != nil {
					t.Fatal(err)
				}
				if got != micros(want) {
					t.Fatalf("step %d, limit %d, key %s at %d:\nredis %+v\nmem   %+v", step, cur, key, now, got, micros(want))
				}
			}
		})
	}
}

// TestSlidingCountsSaturate: a sliding window's count kept under a limit of
// 2^16 or more reaches a limit below it saturated, not cut to 16 bits, when
// a merge hands it back: 65,536 units read under a limit of 8 are over it.
func TestSlidingCountsSaturate(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{ClientTime: true})
	big := mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: 70000, Window: time.Second, Slices: 4, Counter: "c"})
	small := mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: 8, Window: time.Second, Slices: 4, Counter: "c"})
	b := []store.SyncBatch{{Algorithm: big, Key: "z", Events: []store.Event{{Time: t0, Cost: 65536}}}}
	if err := s.Sync(ctx, t0, b); err != nil {
		t.Fatal(err)
	}
	b = []store.SyncBatch{{Algorithm: small, Key: "z"}}
	if err := s.Sync(ctx, t0, b); err != nil {
		t.Fatal(err)
	}
	if d := small.Peek(b[0].State, t0, 1); d.Allowed {
		t.Fatalf("65,536 units read under a limit of 8: %+v", d)
	}
}

// TestBoundedLogLimitChangeKeepsCount changes a bounded-log limit of one
// Counter (600 per minute, then 100, then 1,000; entry sizes 30, 5 and 50)
// under a key's feet on the memory store, one Redis and a Redis Cluster: a
// lowered limit applies at once to the count so far, a raised one admits at
// once exactly what it allows beyond it, and a single entry holding more
// units than the new entry size (10 units, then m = 5) is counted in full.
func TestBoundedLogLimitChangeKeepsCount(t *testing.T) {
	ctx := context.Background()
	alg := func(limit int64) algorithm.Algorithm {
		return mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: limit, Window: time.Minute, Counter: "plan"})
	}
	a600, a100, a1000 := alg(600), alg(100), alg(1000)
	stores := map[string]store.Store{
		"memory":  memstore.New(memstore.Options{}),
		"redis":   newStore(t, Options{ClientTime: true}),
		"cluster": newClusterStore(t),
	}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ms := int64(time.Millisecond)
			admit := func(a algorithm.Algorithm, key string, at, cost int64, n int) int {
				got := 0
				for range n {
					d, err := st.DecideOne(ctx, at, store.Request{Algorithm: a, Key: key, Cost: cost})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						got++
					}
				}
				return got
			}
			if got := admit(a600, "k", t0, 1, 400); got != 400 {
				t.Fatalf("600/min: %d of 400 admitted", got)
			}
			if got := admit(a100, "k", t0+ms, 1, 5); got != 0 {
				t.Fatalf("lowered to 100 with 400 counted: %d of 5 admitted, want 0", got)
			}
			if got := admit(a1000, "k", t0+2*ms, 1, 700); got != 600 {
				t.Fatalf("raised to 1,000 with 400 counted: %d of 700 admitted, want 600", got)
			}
			if got := admit(a600, "one", t0, 10, 1); got != 1 {
				t.Fatal("a request of 10 under 600/min was not admitted")
			}
			if got := admit(a100, "one", t0+ms, 1, 100); got != 90 {
				t.Fatalf("lowered to 100 (m = 5) with one entry of 10: %d admitted, want 90", got)
			}
		})
	}
}

// TestDifferentialLimitChangesSync is TestDifferentialLimitChanges for a
// bounded log with merges in between, as the delayed arrangement pushes
// them: events in time order and late (up to half a window old) are synced
// into the memory store and Redis under whichever limit is current, and
// every decision and every merged state must be equal.
func TestDifferentialLimitChangesSync(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{ClientTime: true})
	mem := memstore.New(memstore.Options{})
	var algs []algorithm.Algorithm
	for _, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1},
		{Algorithm: algorithm.BoundedLog, Limit: 300, Window: time.Second},
	} {
		c.Counter = "changing"
		algs = append(algs, mustAlg(t, c))
	}
	rng := rand.New(rand.NewPCG(5, 11))
	now, cur := t0, 0
	ms := int64(time.Millisecond)
	for step := range 1500 {
		now += rng.Int64N(40) * ms
		if rng.IntN(25) == 0 {
			cur = 1 - cur
		}
		a := algs[cur]
		key := []string{"x", "y"}[rng.IntN(2)]
		if rng.IntN(3) == 0 {
			var evs []store.Event
			for range 1 + rng.IntN(3) {
				evs = append(evs, store.Event{Time: now - rng.Int64N(500)*ms, Cost: 1 + rng.Int64N(max(3, a.Config().Limit/8))})
			}
			bm := []store.SyncBatch{{Algorithm: a, Key: key, Events: evs}}
			br := []store.SyncBatch{{Algorithm: a, Key: key, Events: evs}}
			if err := mem.Sync(ctx, now, bm); err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(ctx, now, br); err != nil {
				t.Fatal(err)
			}
			if !sameState(a, br[0].State, bm[0].State) {
				t.Fatalf("step %d, limit %d, key %s: merged %v\nredis %v\nmem   %v", step, cur, key, evs, br[0].State[:8], bm[0].State[:8])
			}
			continue
		}
		req := store.Request{Algorithm: a, Key: key, Cost: 1 + rng.Int64N(max(3, a.Config().Limit/4))}
		want, err := mem.DecideOne(ctx, now, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.DecideOne(ctx, now, req)
		if err != nil {
			t.Fatal(err)
		}
		if got != micros(want) {
			t.Fatalf("step %d, limit %d, key %s at %d:\nredis %+v\nmem   %+v", step, cur, key, now, got, micros(want))
		}
	}
}
