package bench

// Experiment (d), not a limiter anyone should use: a table whose slot is
// a whole 64-byte cache line, for the algorithms whose state does not fit
// one word. It decides a sliding window of 12 slices, Floodgate's default
// slice count, with the state Floodgate's sliding-window keeps at large
// limits: the newest slice's number and twelve 32-bit counts (seven words),
// beside the key's 64-bit hash. A decision expires the slices the window
// has left behind, sums the twelve and counts the request in the newest.
// The slots are one line each, aligned, with linear probing at most 3/4
// full, 256 mutex-guarded shards and one clock read, so the table at
// 200,000 keys is four times the 16-byte one: it tests what state size
// costs in misses. Exact: the window allows at most limit requests over
// the twelve slices it spans.

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// lineSlot is a hash (zero when empty), the newest slice's number and
// the twelve slices' counts, slice z at z%12: 64 bytes.
type lineSlot struct {
	h, newest uint64
	counts    [12]uint32
}

type lineShard struct {
	mu    sync.Mutex
	slots []lineSlot
	n     int
	_     [24]byte
}

type lineProto struct {
	seed   maphash.Seed
	start  time.Time
	slice  int64 // window / 12
	limit  uint64
	shards [256]lineShard
}

func newLineProto() limiter {
	return &lineProto{seed: maphash.MakeSeed(), start: time.Now(), slice: int64(time.Hour) / 12, limit: 1<<32 - 1}
}

func (p *lineProto) allow(_ context.Context, key string) bool {
	now := p.start.UnixNano() + int64(time.Since(p.start))
	h := maphash.String(p.seed, key) | 1 // never zero: zero marks an empty slot
	sh := &p.shards[h>>56]
	sh.mu.Lock()
	if (sh.n+1)*4 > len(sh.slots)*3 {
		sh.grow()
	}
	mask := uint64(len(sh.slots) - 1)
	i := h & mask
	for sh.slots[i].h != h && sh.slots[i].h != 0 {
		i = (i + 1) & mask
	}
	s := &sh.slots[i]
	if s.h == 0 {
		s.h = h
		sh.n++
	}
	ok := slidingDecide(s, uint64(now/p.slice), p.limit)
	sh.mu.Unlock()
	return ok
}

// slidingDecide decides one request in slice z on the state in s.
func slidingDecide(s *lineSlot, z, limit uint64) bool {
	if z != s.newest {
		for y := s.newest + 1; y <= z && y <= s.newest+12; y++ {
			s.counts[y%12] = 0
		}
		s.newest = z
	}
	var total uint64
	for _, c := range s.counts {
		total += uint64(c)
	}
	if total >= limit {
		return false
	}
	s.counts[z%12]++
	return true
}

func (sh *lineShard) grow() {
	old := sh.slots
	sh.slots = make([]lineSlot, max(16, 2*len(old)))
	mask := uint64(len(sh.slots) - 1)
	for _, s := range old {
		if s.h != 0 {
			i := s.h & mask
			for sh.slots[i].h != 0 {
				i = (i + 1) & mask
			}
			sh.slots[i] = s
		}
	}
}
