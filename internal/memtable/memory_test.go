package memtable

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/testtier"
	"github.com/floodgate-dev/floodgate/store"
)

// heapPerKey returns the live heap a store holds per key after n distinct
// keys of algorithm a were each decided perKey requests (cost 1, spread
// over a second), and the store's shard count.
func heapPerKey(t testing.TB, a algorithm.Algorithm, n, perKey int) (float64, int) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%07d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(Options{})
	now := 1_000 * sec
	for r := range perKey {
		at := now + int64(r)*sec/int64(perKey)
		for _, k := range keys {
			// DecideOne directly: the decide helper's t.Helper costs more
			// than the decision.
			if d, err := s.DecideOne(ctx, at, store.Request{Algorithm: a, Key: k, Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("%s: request %d on %s rejected: %v", a.Name(), r, k, err)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len() != n {
		t.Fatalf("%s: store holds %d keys, want %d", a.Name(), s.Len(), n)
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n), len(s.shards)
}

// TestMemoryPerKey measures live heap per tracked key: at 200,000 keys (the
// baseline's tracked-client count) with one request each, and for bounded-log
// also with every key at its limit (L = 600, e = 0.05; 20,000 keys). The
// store's own bound is checked for states kept in the slot: a slot of
// 8·(1+Words()) bytes at a load of at least 1/2 (the table grows by a
// quarter past 3/4), plus each shard's smallest table. The targets are
// printed beside the figures (they also depend on each algorithm's
// encoding).
func TestMemoryPerKey(t *testing.T) {
	n := 200_000
	if raceEnabled {
		n = 20_000 // the figure is less precise, the bound still holds
	}
	type memCase struct {
		name   string
		a      algorithm.Algorithm
		keys   int
		perKey int
		target float64
	}
	cases := []memCase{{"test-counter", newCounter(100, time.Hour, 3), n, 1, 0}}
	for _, c := range []struct {
		cfg    algorithm.Config
		name   string
		keys   int
		perKey int
		target float64
	}{
		{algorithm.Config{Algorithm: algorithm.FixedWindow}, "", n, 1, 48},
		{algorithm.Config{Algorithm: algorithm.TokenBucket}, "", n, 1, 48},
		{algorithm.Config{Algorithm: algorithm.GCRA}, "", n, 1, 48},
		{algorithm.Config{Algorithm: algorithm.WeightedWindow}, "", n, 1, 48},
		{algorithm.Config{Algorithm: algorithm.SlidingWindow}, "", n, 1, 64},
		// 32-bit counts, kept in 16 bits while they fit (pack.go).
		{algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: algorithm.MaxLimit}, "sliding-window/32", n, 1, 64},
		{algorithm.Config{Algorithm: algorithm.BoundedLog, Tolerance: 0.05}, "bounded-log/light", n, 1, 64},
		{algorithm.Config{Algorithm: algorithm.BoundedLog, Tolerance: 0.05}, "bounded-log/heavy", n / 10, 600, 256},
	} {
		c.cfg.Window = time.Minute
		if c.cfg.Limit == 0 {
			c.cfg.Limit = 600
		}
		a, err := algorithm.New(c.cfg)
		if err != nil {
			t.Fatalf("%+v: %v", c.cfg, err)
		}
		if c.name == "" {
			c.name = string(a.Name())
		}
		cases = append(cases, memCase{c.name, a, c.keys, c.perKey, c.target})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.perKey > 1 && !raceEnabled {
				// 600 decisions on each of 20,000 keys: two minutes on a
				// quiet 2-core machine (500 keys with -race).
				testtier.RequireIntegration(t, "12 million decisions")
			}
			if raceEnabled && c.perKey > 1 {
				c.keys = 500
			}
			start := time.Now()
			got, shards := heapPerKey(t, c.a, c.keys, c.perKey)
			target := "-"
			if c.target > 0 {
				target = fmt.Sprintf("%.0f", c.target)
			}
			bound := "-"
			if w := c.a.Words(); w <= maxInline {
				slot := float64(8 * (1 + w))
				b := slot*2 + slot*minCap*float64(shards)/float64(c.keys)
				bound = fmt.Sprintf("%.0f", b)
				if got > b {
					t.Errorf("%s with %d words: %.1f bytes/key, over the store's bound %.0f", c.name, w, got, b)
				}
			}
			t.Logf("%-18s words %3d: %6.1f bytes/key at %d keys, %d requests each (store bound %s, issue target %s) in %v",
				c.name, c.a.Words(), got, c.keys, c.perKey, bound, target, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestSweepGivesMemoryBack checks that once keys go idle, Sweep drops them
// and the heap they used is released.
func TestSweepGivesMemoryBack(t *testing.T) {
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	c := newCounter(100, time.Second, 3)
	s := New(Options{Shards: 16})
	var base, full, swept runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	for i := range n {
		decide(t, s, c, fmt.Sprint("k", i), sec, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&full)
	if got := s.Sweep(10 * sec); got != n {
		t.Fatalf("Sweep dropped %d of %d idle keys", got, n)
	}
	runtime.GC()
	runtime.ReadMemStats(&swept)
	used := int64(full.HeapAlloc) - int64(base.HeapAlloc)
	left := int64(swept.HeapAlloc) - int64(base.HeapAlloc)
	t.Logf("%d keys: %d bytes; after Sweep: %d bytes", n, used, left)
	if s.Len() != 0 || left > used/20 {
		t.Fatalf("after Sweep: Len %d, %d of %d bytes still held", s.Len(), left, used)
	}
	// The store still works after giving everything back.
	if d := decide(t, s, c, "k1", 11*sec, 1); !d.Allowed || d.Remaining != 99 {
		t.Fatalf("decision after Sweep: %+v", d)
	}
	runtime.KeepAlive(s)
}
