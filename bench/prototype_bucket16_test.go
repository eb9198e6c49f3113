package bench

// Experiment (d), not a limiter anyone should use: the one-slot table of
// prototype_test.go (full 64-bit hash, 8-byte state, mutex) with its
// 16-byte slots grouped four to a 64-byte bucket, one cache line, and the
// table up to 7/8 full. It separates what the bucket layout and a fuller
// table buy from what the 8-byte slots of prototype_word_test.go buy, for
// a table that keeps the whole hash and state width (as Floodgate's does).
// Exact like the one-slot table.
//
// The same table also decides gcra (a token bucket is the same algorithm)
// and weighted-window in its 8-byte state, to show what those algorithms
// cost when their state fits one word beside the hash: gcra keeps only the
// theoretical arrival time, in Unix nanoseconds; weighted-window keeps the
// previous and the current window's counts (24 bits each, limits below
// 2^24) and a 16-bit window tag (see wordDecide for why a tag is exact
// given an idle sweep).

import (
	"context"
	"hash/maphash"
	"math/bits"
	"sync"
	"time"
)

type bucket16 [4]protoSlot

type bucket16Shard struct {
	mu sync.Mutex
	b  []bucket16
	n  int
	_  [24]byte
}

// The algorithms a bucket16Proto decides.
const (
	b16FixedWindow = iota
	b16GCRA
	b16WeightedWindow
)

type bucket16Proto struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64
	alg    int
	shards [256]bucket16Shard
}

func newBucket16Proto() limiter {
	return &bucket16Proto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: 1<<32 - 1}
}

func newBucket16GCRA() limiter {
	return &bucket16Proto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: 1<<32 - 1, alg: b16GCRA}
}

func newBucket16Weighted() limiter {
	return &bucket16Proto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: wordLimit, alg: b16WeightedWindow}
}

// bucket16Find returns the slot of h in b, or the empty slot where it
// would go. b must have an empty slot.
func bucket16Find(b []bucket16, h uint64) *protoSlot {
	mask := uint64(len(b) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		for j := range b[i] {
			if s := &b[i][j]; s.h == h || s.h == 0 {
				return s
			}
		}
	}
}

func (p *bucket16Proto) allow(_ context.Context, key string) bool {
	now := p.start.UnixNano() + int64(time.Since(p.start))
	h := maphash.String(p.seed, key) | 1 // never zero: zero marks an empty slot
	win := uint64(now/p.window) << 32
	sh := &p.shards[h>>56]
	sh.mu.Lock()
	if (sh.n+1)*8 > len(sh.b)*4*7 {
		old := sh.b
		sh.b = make([]bucket16, max(4, 2*len(old)))
		for k := range old {
			for _, s := range old[k] {
				if s.h != 0 {
					*bucket16Find(sh.b, s.h) = s
				}
			}
		}
	}
	s := bucket16Find(sh.b, h)
	if s.h == 0 {
		s.h = h
		sh.n++
	}
	var ok bool
	switch p.alg {
	case b16FixedWindow:
		st := s.st
		if st&^(1<<32-1) != win {
			st = win
		}
		if ok = st&(1<<32-1) < p.limit; ok {
			s.st = st + 1
		}
	case b16GCRA:
		s.st, ok = gcraDecide(s.st, now, p.window, p.limit)
	default:
		s.st, ok = weightedDecide(s.st, now, p.window, p.limit)
	}
	sh.mu.Unlock()
	return ok
}

// gcraDecide decides one request with limit requests per window and a
// burst of limit on the theoretical arrival time tat (Unix nanoseconds;
// zero for a new key) and returns the new one.
func gcraDecide(tat uint64, now, window int64, limit uint64) (uint64, bool) {
	interval := window / int64(limit)
	t := max(int64(tat), now)
	if t-now > interval*int64(limit-1) {
		return tat, false
	}
	return uint64(t + interval), true
}

// weightedDecide decides one request on a weighted-window state: window
// tag (bits 48-63), the previous window's count (bits 24-47) and the
// current one's (bits 0-23). It allows the request when
// previous·(window-elapsed)/window + current < limit, compared exactly in
// 128 bits.
func weightedDecide(st uint64, now, window int64, limit uint64) (uint64, bool) {
	w := uint64(now / window)
	elapsed := uint64(now % window)
	tag, prev, cur := st>>48, st>>24&wordCountMask, st&wordCountMask
	if tag != w&0xffff {
		if (tag+1)&0xffff == w&0xffff {
			prev = cur
		} else {
			prev = 0
		}
		cur = 0
	}
	st = w<<48 | prev<<24 | cur
	if cur >= limit {
		return st, false
	}
	lh, ll := bits.Mul64(prev, uint64(window)-elapsed)
	rh, rl := bits.Mul64(limit-cur, uint64(window))
	if lh > rh || lh == rh && ll >= rl {
		return st, false
	}
	return st + 1, true
}
