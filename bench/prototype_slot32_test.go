package bench

// Experiment (d), not a limiter anyone should use: the one-slot table of
// prototype_test.go, 7/8 full, with 32-byte slots of which the decision
// uses the first 16 (hash and fixed-window state). It tests what a state
// of two or three words costs in misses alone, the size of Floodgate's
// token-bucket and gcra slots (24 bytes) and of a light bounded-log key
// (32): at 200,000 keys the table is twice the 16-byte one. Exact like the
// one-slot table.

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

type slot32 struct {
	h, st uint64
	_     [2]uint64 // room a larger state would use
}

type slot32Shard struct {
	mu    sync.Mutex
	slots []slot32
	n     int
	_     [24]byte
}

type slot32Proto struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64
	shards [256]slot32Shard
}

func newSlot32Proto() limiter {
	return &slot32Proto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: 1<<32 - 1}
}

func (p *slot32Proto) allow(_ context.Context, key string) bool {
	now := p.start.UnixNano() + int64(time.Since(p.start))
	h := maphash.String(p.seed, key) | 1 // never zero: zero marks an empty slot
	win := uint64(now/p.window) << 32
	sh := &p.shards[h>>56]
	sh.mu.Lock()
	if (sh.n+1)*8 > len(sh.slots)*7 {
		old := sh.slots
		sh.slots = make([]slot32, max(16, 2*len(old)))
		for _, s := range old {
			if s.h != 0 {
				*sh.find(s.h) = s
			}
		}
	}
	s := sh.find(h)
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

// find returns the slot of h, or the empty slot where it would go.
func (sh *slot32Shard) find(h uint64) *slot32 {
	mask := uint64(len(sh.slots) - 1)
	i := h & mask
	for sh.slots[i].h != h && sh.slots[i].h != 0 {
		i = (i + 1) & mask
	}
	return &sh.slots[i]
}
