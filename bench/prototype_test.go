package bench

// An experiment, not a limiter anyone should use: the smallest table that
// makes a fixed-window decision with one cache miss, measured in the same
// run and harness as Floodgate and its peers to show the floor a memory
// table can reach on this machine. It keeps the 64-bit hash of the key and
// an 8-byte state (window number in the high 32 bits, count in the low 32)
// side by side in one 16-byte slot, with open addressing (linear probing,
// at most 3/4 full), 256 mutex-guarded shards and one clock read per
// decision. It has no key bound, no expiry, no eviction and no Decision
// beyond allowed or not: everything Floodgate's store does on top of this
// is what the side-by-side figures put a price on.

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

type protoSlot struct{ h, st uint64 }

type protoShard struct {
	mu    sync.Mutex
	slots []protoSlot
	n     int
	_     [24]byte
}

type prototype struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64
	load8  int // the most a shard's table holds, in eighths
	shards [256]protoShard
}

func newPrototype() limiter {
	return &prototype{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: 1<<32 - 1, load8: 6}
}

// newPrototypeFull is the experiment with its tables up to 7/8 full
// instead of 3/4: at 200,000 keys they are half the size (about 76% full
// instead of 38%) with longer probes, the same fill as the bucket
// experiments of prototype_bucket16_test.go. It separates what a smaller
// table buys from what the cache-line buckets buy.
func newPrototypeFull() limiter {
	p := newPrototype().(*prototype)
	p.load8 = 7
	return p
}

func (p *prototype) allow(_ context.Context, key string) bool {
	return p.allowAt(p.start.UnixNano()+int64(time.Since(p.start)), key)
}

// allowAt decides one request on key at now, in Unix nanoseconds.
func (p *prototype) allowAt(now int64, key string) bool {
	h := maphash.String(p.seed, key) | 1 // never zero: zero marks an empty slot
	win := uint64(now/p.window) << 32
	sh := &p.shards[h>>56]
	sh.mu.Lock()
	if (sh.n+1)*8 > len(sh.slots)*p.load8 {
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

func (sh *protoShard) grow() {
	old := sh.slots
	sh.slots = make([]protoSlot, max(16, 2*len(old)))
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
