package bench

// Experiments (d), not limiters anyone should use: the 8-byte slots of
// prototype_word_test.go grouped eight to a 64-byte bucket, one cache line,
// so a decision reads one line however far it probes within the bucket,
// and the table can be fuller (at most 7/8) without costing a second miss.
// A key lives in the bucket its fingerprint names or, when that is full,
// the next one with room. Exactness as for the word slots.
//
// bucketProto takes the shard mutex on each decision. bucketCASProto is
// the same layout without the mutex on the decision path, as in
// prototype_cas_test.go: a decision on a known key is a load and one
// compare-and-swap of its slot word (fingerprint and state together, so
// the CAS also checks the key); inserting and growing take the mutex, and
// growing first sets the moved flag in every slot, empty ones included.

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

type bucket [8]uint64

// bucketFind returns the bucket and index of fp's slot in b, or of the
// empty slot where it would go. b must have an empty slot.
func bucketFind(b []bucket, fp uint64) (*bucket, int) {
	mask := uint64(len(b) - 1)
	for i := fp >> 32 & mask; ; i = (i + 1) & mask {
		bk := &b[i]
		for j := range bk {
			if w := atomic.LoadUint64(&bk[j]); w&^wordLowMask == fp || w&^wordLowMask == 0 {
				return bk, j
			}
		}
	}
}

// bucketRehash places the used slots of old in n fresh buckets from alloc.
func bucketRehash(old []bucket, n int, alloc func(int) []bucket) []bucket {
	b := alloc(n)
	for k := range old {
		for _, w := range old[k] {
			if w&^wordLowMask != 0 {
				bk, j := bucketFind(b, w&^wordLowMask)
				bk[j] = w &^ wordMoved
			}
		}
	}
	return b
}

func heapBuckets(n int) []bucket { return make([]bucket, n) }

type bucketShard struct {
	mu sync.Mutex
	b  []bucket
	n  int
	_  [24]byte
}

type bucketProto struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64 // at most wordLimit
	shards [256]bucketShard
}

func newBucketProto() limiter {
	return &bucketProto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: wordLimit}
}

func (p *bucketProto) allow(_ context.Context, key string) bool {
	now := p.start.UnixNano() + int64(time.Since(p.start))
	h := maphash.String(p.seed, key)
	fp, tag := wordFingerprint(h), wordTag(now, p.window)
	sh := &p.shards[h>>56]
	sh.mu.Lock()
	if (sh.n+1)*8 > len(sh.b)*8*7 {
		sh.b = bucketRehash(sh.b, max(2, 2*len(sh.b)), heapBuckets)
	}
	bk, j := bucketFind(sh.b, fp)
	w := bk[j]
	if w == 0 {
		w = fp
		sh.n++
	}
	w, ok := wordDecide(w, tag, p.limit)
	bk[j] = w
	sh.mu.Unlock()
	return ok
}

type bucketTable struct{ b []bucket }

type bucketCASShard struct {
	mu  sync.Mutex // held to insert a key or grow; n is guarded by it
	tab atomic.Pointer[bucketTable]
	n   int
	_   [40]byte
}

type bucketCASProto struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64 // at most wordLimit
	alloc  func(int) []bucket
	shards [256]bucketCASShard
}

func newBucketCASProto() limiter { return newBucketCASWith(heapBuckets) }

func newBucketCASWith(alloc func(int) []bucket) *bucketCASProto {
	p := &bucketCASProto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: wordLimit, alloc: alloc}
	for i := range p.shards {
		p.shards[i].tab.Store(&bucketTable{b: alloc(2)})
	}
	return p
}

func (p *bucketCASProto) allow(_ context.Context, key string) bool {
	return p.allowAt(p.start.UnixNano()+int64(time.Since(p.start)), key)
}

// allowAt decides one request on key at now, in Unix nanoseconds.
func (p *bucketCASProto) allowAt(now int64, key string) bool {
	h := maphash.String(p.seed, key)
	fp, tag := wordFingerprint(h), wordTag(now, p.window)
	sh := &p.shards[h>>56]
	for {
		bk, j := bucketFind(sh.tab.Load().b, fp)
		w := atomic.LoadUint64(&bk[j])
		for w&^wordLowMask == fp && w&wordMoved == 0 {
			nw, ok := wordDecide(w, tag, p.limit)
			if !ok {
				return false
			}
			if atomic.CompareAndSwapUint64(&bk[j], w, nw) {
				return true
			}
			w = atomic.LoadUint64(&bk[j])
		}
		if w&wordMoved != 0 {
			sh.mu.Lock() // the grower holds it until the new table is in place
			sh.mu.Unlock()
		} else {
			p.insert(sh, fp)
		}
	}
}

// insert adds fp to the shard's current table unless a racing insert did.
func (p *bucketCASProto) insert(sh *bucketCASShard, fp uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if (sh.n+1)*8 > len(t.b)*8*7 {
		for k := range t.b {
			for j := range t.b[k] {
				w := &t.b[k][j]
				for old := atomic.LoadUint64(w); !atomic.CompareAndSwapUint64(w, old, old|wordMoved); {
					old = atomic.LoadUint64(w)
				}
			}
		}
		t = &bucketTable{b: bucketRehash(t.b, 2*len(t.b), p.alloc)}
		sh.tab.Store(t)
	}
	bk, j := bucketFind(t.b, fp)
	if atomic.LoadUint64(&bk[j]) == 0 {
		atomic.StoreUint64(&bk[j], fp)
		sh.n++
	}
}
