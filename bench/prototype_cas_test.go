package bench

// Experiment (a), not a limiter anyone should use: the one-slot table of
// prototype_test.go without the mutex on the decision path. It tests what
// the shard lock costs. A decision on a known key finds its 16-byte slot
// without a lock and updates the state word with one compare-and-swap; only
// inserting a key and growing the table take the shard's mutex. Growing
// freezes every state word (sets its moved bit with a CAS) before copying,
// so a decision racing a grow never updates a copy that is being dropped:
// it sees the bit, waits for the grower's mutex and retries on the new
// table. Exact like the one-slot table: same state, same clock read.

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// casMoved, in a state word, marks a slot whose table is being replaced.
const casMoved = 1 << 63

type casTable struct{ slots []protoSlot }

type casShard struct {
	mu  sync.Mutex // held to insert a key or grow; n is guarded by it
	tab atomic.Pointer[casTable]
	n   int
	_   [40]byte
}

type casProto struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64
	shards [256]casShard
}

func newCASProto() limiter {
	p := &casProto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: 1<<32 - 1}
	for i := range p.shards {
		p.shards[i].tab.Store(&casTable{slots: make([]protoSlot, 16)})
	}
	return p
}

func (p *casProto) allow(_ context.Context, key string) bool {
	now := p.start.UnixNano() + int64(time.Since(p.start))
	h := maphash.String(p.seed, key) | 1 // never zero: zero marks an empty slot
	win := uint64(now/p.window) << 32
	sh := &p.shards[h>>56]
	for {
		slots := sh.tab.Load().slots
		mask := uint64(len(slots) - 1)
		i := h & mask
		for {
			if x := atomic.LoadUint64(&slots[i].h); x == h || x == 0 {
				break
			}
			i = (i + 1) & mask
		}
		s := &slots[i]
		if atomic.LoadUint64(&s.h) == 0 {
			sh.insert(h)
			continue
		}
		for {
			old := atomic.LoadUint64(&s.st)
			if old&casMoved != 0 {
				break // being copied: wait for the grower below
			}
			st := old
			if st&^(1<<32-1) != win {
				st = win
			}
			if st&(1<<32-1) >= p.limit {
				return false
			}
			if atomic.CompareAndSwapUint64(&s.st, old, st+1) {
				return true
			}
		}
		sh.mu.Lock() // the grower holds it until the new table is in place
		sh.mu.Unlock()
	}
}

// insert adds h to the shard's current table unless a racing insert did.
func (sh *casShard) insert(h uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if (sh.n+1)*4 > len(t.slots)*3 {
		t = sh.grow(t)
	}
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].h != h && t.slots[i].h != 0 {
		i = (i + 1) & mask
	}
	if t.slots[i].h == 0 {
		atomic.StoreUint64(&t.slots[i].h, h) // its state is already zero
		sh.n++
	}
}

// grow freezes every state of t, copies the slots into a table twice the
// size and publishes it. The caller holds sh.mu.
func (sh *casShard) grow(t *casTable) *casTable {
	nt := &casTable{slots: make([]protoSlot, 2*len(t.slots))}
	mask := uint64(len(nt.slots) - 1)
	for k := range t.slots {
		s := &t.slots[k]
		old := atomic.LoadUint64(&s.st)
		for !atomic.CompareAndSwapUint64(&s.st, old, old|casMoved) {
			old = atomic.LoadUint64(&s.st)
		}
		if s.h != 0 {
			i := s.h & mask
			for nt.slots[i].h != 0 {
				i = (i + 1) & mask
			}
			nt.slots[i] = protoSlot{h: s.h, st: old}
		}
	}
	sh.tab.Store(nt)
	return nt
}
