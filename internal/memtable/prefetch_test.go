package memtable

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// TestPrefetchViewsCurrent checks what Bound.Prefetch reads without the
// lock: for every shard, the view the limit's table published is its
// current slots, size and stride, through growth, a packed table's
// conversion and a sweep that gives the slots back; tables made before
// the Bind publish too. Decisions through Prefetch and DecideHashedInto are
// those of DecideInto, and allocate nothing for a known key.
func TestPrefetchViewsCurrent(t *testing.T) {
	a, err := algorithm.New(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1000, Window: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Shards: 4})
	now := int64(1<<32)*int64(time.Millisecond) - int64(time.Second)
	for i := range 10 { // tables made before any Bound asks for views
		decide(t, s, a, fmt.Sprint("early", i), now, 1)
	}
	b, err := s.Bind(a)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for i := range s.shards {
			var tb *table
			if tables := s.shards[i].tables; b.l.id < len(tables) {
				tb = tables[b.l.id]
			}
			v := b.views[i].Load()
			if tb == nil {
				if v != nil {
					t.Fatalf("%s: shard %d has a view but no table", when, i)
				}
				continue
			}
			if v == nil || v.cap != tb.cap || v.stride != tb.stride || len(v.slots) != len(tb.slots) ||
				(len(v.slots) > 0 && &v.slots[0] != &tb.slots[0]) {
				t.Fatalf("%s: shard %d's view (cap %d stride %d len %d) is not its table's (cap %d stride %d len %d)",
					when, i, v.cap, v.stride, len(v.slots), tb.cap, tb.stride, len(tb.slots))
			}
		}
	}
	check("after Bind")
	var got, want algorithm.Decision
	for i := range 2000 {
		key := fmt.Sprint("k", i)
		b.DecideHashedInto(&got, now, b.Prefetch(key), 1)
		if !got.Allowed || got.Remaining != 999 {
			t.Fatalf("%s: %+v, want allowed with 999 remaining", key, got)
		}
	}
	check("after growth")
	b.DecideHashedInto(&got, now, b.Prefetch("k1"), 1)
	b.DecideInto(&want, now, "k1", 1)
	if !got.Allowed || got.Remaining != 998 || want.Remaining != 997 {
		t.Fatalf("Prefetch and DecideHashedInto: %+v, then DecideInto: %+v; want 998 then 997 remaining", got, want)
	}
	k := b.Prefetch("k2")
	if n := testing.AllocsPerRun(1000, func() { b.DecideHashedInto(&got, now, k, 0) }); n != 0 {
		t.Fatalf("DecideHashedInto on a known key allocates %v times", n)
	}
	// The zero Hashed is the empty key, not an empty slot.
	b.DecideHashedInto(&got, now, Hashed{}, 1)
	b.DecideInto(&want, now, "", 1)
	if !got.Allowed || got.Remaining != 999 || want.Remaining != 998 {
		t.Fatalf("zero Hashed: %+v, then the empty key: %+v; want 999 then 998 remaining", got, want)
	}
	now += 2 * int64(time.Second) // window number 2^32: the packed tables convert
	for i := range 2000 {
		b.DecideHashedInto(&got, now, b.Prefetch(fmt.Sprint("k", i)), 1)
	}
	for i := range s.shards {
		if tb := s.shards[i].tables[b.l.id]; tb.packed {
			t.Fatalf("shard %d's table is still packed", i)
		}
	}
	check("after conversion")
	s.Sweep(now + int64(time.Hour))
	check("after a sweep gave the slots back")
	b.DecideHashedInto(&got, now+int64(time.Hour), b.Prefetch("again"), 1)
	check("after the first key of an empty table")
}

// TestPrefetchConcurrentGrowth runs Prefetch and DecideHashedInto from
// several goroutines while their keys grow the tables and a small key
// bound evicts: under the race detector this checks that Prefetch reads
// nothing the shard's lock guards. Each key has one unit per hour and asks
// twice: never may both be allowed (eviction hands out no allowance; the
// eviction summary may reject a first request).
func TestPrefetchConcurrentGrowth(t *testing.T) {
	a, err := algorithm.New(algorithm.Config{Algorithm: algorithm.TokenBucket, Limit: 1, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Shards: 2, MaxKeys: 3000})
	b, err := s.Bind(a)
	if err != nil {
		t.Fatal(err)
	}
	const workers, keys = 4, 2000
	done := make(chan error, workers)
	for w := range workers {
		go func() {
			var d algorithm.Decision
			for i := range keys {
				key := fmt.Sprint(w, "-", i)
				allowed := 0
				for range 2 {
					b.DecideHashedInto(&d, sec, b.Prefetch(key), 1)
					if d.Allowed {
						allowed++
					}
				}
				if allowed > 1 {
					done <- fmt.Errorf("%s: both requests allowed with a limit of 1", key)
					return
				}
			}
			done <- nil
		}()
	}
	for range workers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
