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
