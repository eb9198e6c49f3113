package memtable

import (
	"sync/atomic"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// A Bound is a Store bound to one Algorithm, for a caller that always
// decides with the same one (a floodgate.Limiter): its Decide skips the
// lookup of the algorithm's limit that DecideOne makes on every call, and
// decides a counting algorithm's tracked key with its direct form
// (algorithm.Direct).
type Bound struct {
	s   *Store
	a   algorithm.Algorithm
	l   *limit
	dir *algorithm.Direct // a's Direct form, or nil
	// views are the limit's tables' slots by shard, for Prefetch.
	views []atomic.Pointer[slotView]
}

// Bind returns s bound to a. It fails only as DecideOne would for a.
func (s *Store) Bind(a algorithm.Algorithm) (*Bound, error) {
	if a == nil {
		return nil, store.ErrNoAlgorithm
	}
	l, err := s.limitSlow(a, a.Config(), true) // pinned: never retired
	if err != nil {
		return nil, err
	}
	b := &Bound{s: s, a: a, l: l, views: s.views(l)}
	b.dir, _ = directForms(a)
	return b, nil
}

// views returns l's slot views by shard, asking l's tables to publish
// them from now on.
func (s *Store) views(l *limit) []atomic.Pointer[slotView] {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	if vs := l.views.Load(); vs != nil {
		return *vs
	}
	vs := make([]atomic.Pointer[slotView], len(s.shards))
	l.views.Store(&vs)
	// Tables made from here on publish themselves; publish those made
	// before. Either way under the shard's lock, so the last view
	// published is the table's current one.
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if l.id < len(sh.tables) && sh.tables[l.id] != nil {
			sh.tables[l.id].publish()
		}
		sh.mu.Unlock()
	}
	return vs
}

// Decide decides a request of cost for key at time now and counts it if
// allowed; it is DecideOne for the bound algorithm and allocates nothing
// when the key is already tracked.
func (b *Bound) Decide(now int64, key string, cost int64) algorithm.Decision {
	return b.s.decide(b.l, b.a, b.dir, now, key, cost)
}

// DecideInto is Decide writing the decision into *d, which saves copying
// it on the way back (see decideInto).
func (b *Bound) DecideInto(d *algorithm.Decision, now int64, key string, cost int64) {
	b.s.decideInto(d, b.l, b.a, b.dir, now, key, cost)
}

// Hashed is a key as Bound.Prefetch hashed it, for Bound.DecideHashedInto
// on a Bound of the same Store. The zero Hashed stands for the empty key.
type Hashed struct{ h uint64 }

// Prefetch hashes key and starts bringing its slot into the processor's
// cache, without taking a lock or waiting for the memory. A caller with
// work to do before the decision, such as reading the clock, does it
// between Prefetch and DecideHashedInto: that work then overlaps the
// memory access, which at hundreds of thousands of keys is most of what a
// decision costs. Where the store has no prefetch instruction for the
// processor (see prefetch_asm.go) it only hashes.
func (b *Bound) Prefetch(key string) Hashed {
	h := b.s.hash(key)
	if v := b.views[b.s.shardIndex(h)].Load(); v != nil && v.cap > 0 {
		prefetch(&v.slots[homeOf(h, v.cap)*v.stride], uintptr(v.stride)*8)
	}
	return Hashed{h}
}

// DecideHashedInto is DecideInto for the key that Prefetch hashed as k.
func (b *Bound) DecideHashedInto(d *algorithm.Decision, now int64, k Hashed, cost int64) {
	b.s.decideHashed(d, b.l, b.a, b.dir, now, k.h, cost)
}

// Unwrap returns the table behind s when s is a memstore.Store, else nil.
// Package memstore sets it when it is linked in: the root package's
// Limiter binds its memory store's table without a method of memstore's
// public API.
var Unwrap = func(s store.Store) *Store { return nil }
