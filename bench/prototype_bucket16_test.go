package bench

// Experiment (d), not a limiter anyone should use: the one-slot table of
// prototype_test.go (full 64-bit hash, 8-byte state, mutex) with its
// 16-byte slots grouped four to a 64-byte bucket, one cache line, and the
// table up to 7/8 full. It separates what the bucket layout and a fuller
// table buy from what the 8-byte slots of prototype_word_test.go buy, for
// a table that keeps the whole hash and state width (as Floodgate's does).
// Exact like the one-slot table.

import (
	"context"
	"hash/maphash"
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

type bucket16Proto struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64
	shards [256]bucket16Shard
}

func newBucket16Proto() limiter {
	return &bucket16Proto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: 1<<32 - 1}
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
	st := s.st
	if st&^(1<<32-1) != win {
		st = win
	}
	ok := st&(1<<32-1) < p.limit
	if ok {
		s.st = st + 1
	}
	sh.mu.Unlock()
	return ok
}
