package memstore

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// heapPerKey returns the live heap a store holds per key after n distinct
// keys of algorithm a were decided once each, and the store's shard count.
func heapPerKey(t testing.TB, a algorithm.Algorithm, n int) (float64, int) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%07d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(Options{})
	now := 1_000 * sec
	for _, k := range keys {
		decide(t, s, a, k, now, 1)
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

// TestMemoryPerKey measures resident heap per tracked key at 200,000 keys
// (the seed's tracked-client count). The store's own promise is checked
// for every algorithm: 8·(Words()+1) bytes of entry, plus chunk slack and
// index. The targets
// (48 bytes; 64 for a 12-slice sliding window) are printed beside the
// figure; they also depend on how many words each algorithm's state needs.
func TestMemoryPerKey(t *testing.T) {
	n := 200_000
	if raceEnabled {
		n = 20_000 // the figure is less precise, the bound still holds
	}
	cases := []algorithm.Algorithm{
		newCounter(100, time.Hour, 3),
	}
	targets := map[string]float64{
		algorithm.FixedWindow: 48, algorithm.TokenBucket: 48, algorithm.GCRA: 48,
		algorithm.WeightedWindow: 48, algorithm.SlidingWindow: 64,
	}
	for _, name := range []string{algorithm.FixedWindow, algorithm.TokenBucket, algorithm.GCRA,
		algorithm.WeightedWindow, algorithm.SlidingWindow} {
		a, err := algorithm.New(algorithm.Config{Algorithm: name, Limit: 600, Window: time.Minute})
		if err != nil {
			t.Logf("%s: not measured: %v", name, err)
			continue
		}
		cases = append(cases, a)
	}
	for _, a := range cases {
		start := time.Now()
		got, shards := heapPerKey(t, a, n)
		// Entry, up to one partly used chunk per shard, and at most 20
		// bytes of index (8-byte slots, at least 40% full).
		entry := float64(8*(a.Words()+1)) * pageRounding(8*(a.Words()+1)*chunkLen)
		bound := entry*(1+float64(shards*chunkLen)/float64(n)) + 20
		target := "-"
		if v, ok := targets[a.Name()]; ok {
			target = fmt.Sprintf("%.0f", v)
		}
		t.Logf("%-16s words %2d: %5.1f bytes/key at %d keys (store bound %.0f, issue target %s) in %v",
			a.Name(), a.Words(), got, n, bound, target, time.Since(start).Round(time.Millisecond))
		if got > bound {
			t.Errorf("%s with %d words: %.1f bytes/key, over the store's bound %.0f", a.Name(), a.Words(), got, bound)
		}
	}
}

// pageRounding is the factor by which the allocator rounds an allocation of
// size bytes up: large objects (over 32 KiB) take whole 8 KiB pages. Chunks
// of the common small states fill their size classes exactly.
func pageRounding(size int) float64 {
	if size <= 32<<10 {
		return 1
	}
	return float64((size+8<<10-1)/(8<<10)*(8<<10)) / float64(size)
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
