package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// experimentsWithLimit builds each experiment of prototype_*_test.go (the
// diagnostics without a clock excepted) with the given limit.
func experimentsWithLimit(limit uint64) map[string]limiter {
	m := map[string]limiter{
		"one-slot": newPrototype(), "cas": newCASProto(), "word-slot": newWordProto(),
		"bucket16": newBucket16Proto(), "bucket": newBucketProto(),
		"bucket-cas": newBucketCASProto(), "bucket-cas-hugepage": newHugeBucketProto(),
		"one-slot-7of8": newPrototypeFull(), "bucket16-gcra": newBucket16GCRA(),
		"bucket16-weighted": newBucket16Weighted(), "line-slot-sliding": newLineProto(),
		"slot32": newSlot32Proto(),
	}
	m["one-slot"].(*prototype).limit = limit
	m["one-slot-7of8"].(*prototype).limit = limit
	m["bucket16-gcra"].(*bucket16Proto).limit = limit
	m["bucket16-weighted"].(*bucket16Proto).limit = limit
	m["line-slot-sliding"].(*lineProto).limit = limit
	m["slot32"].(*slot32Proto).limit = limit
	m["cas"].(*casProto).limit = limit
	m["word-slot"].(*wordProto).limit = limit
	m["bucket16"].(*bucket16Proto).limit = limit
	m["bucket"].(*bucketProto).limit = limit
	m["bucket-cas"].(*bucketCASProto).limit = limit
	m["bucket-cas-hugepage"].(hugeBucketProto).limit = limit
	return m
}

// TestExperimentsExact checks that every experiment admits exactly its
// limit per key and window while goroutines on all CPUs decide on the
// same 20,000 keys, inserting them and growing the tables as they go: the
// lock-free experiments' decisions race their grows. Keys that share a
// 40-bit fingerprint share a counter in the 8-byte-slot experiments (see
// prototype_word_test.go): they may get less than the limit, never more,
// and one key in 1,000 is allowed to.
func TestExperimentsExact(t *testing.T) {
	const limit, keys, tries, workers = 5, 20_000, 3, 4
	if runtime.GOMAXPROCS(0) < 2 {
		t.Log("one CPU: the goroutines interleave but do not run at once")
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("key-", i)
	}
	for name, lim := range experimentsWithLimit(limit) {
		t.Run(name, func(t *testing.T) {
			if c, ok := lim.(interface{ close() }); ok {
				defer c.close()
			}
			allowed := make([]atomic.Int32, keys)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					step := []int{1, 3, 7, 9}[w] // coprime with keys: each worker its own order
					for k := range keys * tries {
						i := (k*step + w*keys/workers) % keys
						if lim.allow(context.Background(), names[i]) {
							allowed[i].Add(1)
						}
					}
				})
			}
			wg.Wait()
			short := 0
			for i := range allowed {
				switch n := allowed[i].Load(); {
				case n > limit:
					t.Fatalf("%s: %d requests allowed, limit %d", names[i], n, limit)
				case n < limit:
					short++
				}
			}
			if short > keys/1000 {
				t.Errorf("%d keys of %d allowed fewer than %d requests", short, keys, limit)
			}
		})
	}
}

// TestExperimentsNewWindow checks that a key's count starts again in the
// next window, for the experiments that take the time as an argument and
// for the 8-byte slot's window tag.
func TestExperimentsNewWindow(t *testing.T) {
	p := newPrototype().(*prototype)
	b := newBucketCASWith(heapBuckets)
	p.limit, b.limit = 2, 2
	now := time.Now().UnixNano()
	for _, w := range []int64{0, 1, 128, 129} {
		at := now + w*int64(time.Hour)
		for i := range 3 {
			if got := p.allowAt(at, "k"); got != (i < 2) {
				t.Errorf("one-slot, window +%d, request %d: allowed %v", w, i, got)
			}
			if got := b.allowAt(at, "k"); got != (i < 2) {
				t.Errorf("bucket-cas, window +%d, request %d: allowed %v", w, i, got)
			}
		}
	}
}

// TestExperimentAlgorithms checks the decisions of the gcra,
// weighted-window and sliding-window experiments across time.
func TestExperimentAlgorithms(t *testing.T) {
	allowedOf := func(n int, decide func() bool) int {
		k := 0
		for range n {
			if decide() {
				k++
			}
		}
		return k
	}
	var tat uint64
	gcra := func(now int64) func() bool {
		return func() (ok bool) { tat, ok = gcraDecide(tat, now, 5e9, 5); return ok }
	}
	var st uint64
	weighted := func(now int64) func() bool {
		return func() (ok bool) { st, ok = weightedDecide(st, now, 10, 10); return ok }
	}
	var s lineSlot
	sliding := func(z uint64) func() bool { return func() bool { return slidingDecide(&s, z, 3) } }
	for _, c := range []struct {
		name      string
		tries     int
		decide    func() bool
		wantAllow int
	}{
		{"gcra burst", 9, gcra(100e9), 5},
		{"gcra one interval later", 9, gcra(101e9), 1},
		{"gcra idle", 9, gcra(200e9), 5},
		{"weighted window 0", 12, weighted(0), 10},
		{"weighted window 1 start", 12, weighted(10), 0},
		{"weighted window 1 half", 12, weighted(15), 5},
		{"weighted window 3", 12, weighted(30), 10},
		{"sliding slice 0", 5, sliding(0), 3},
		{"sliding slice 11", 5, sliding(11), 0},
		{"sliding slice 12", 5, sliding(12), 3},
		{"sliding slice 40", 5, sliding(40), 3},
	} {
		if got := allowedOf(c.tries, c.decide); got != c.wantAllow {
			t.Errorf("%s: %d of %d allowed, want %d", c.name, got, c.tries, c.wantAllow)
		}
	}
}
