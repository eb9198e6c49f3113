package memtable

import (
	"context"
	"slices"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// DecideOne decides req at time now and counts it if allowed. It allocates
// nothing when the key is already tracked. ctx is not consulted: an
// in-memory decision never blocks for long.
func (s *Store) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	if req.Algorithm == nil {
		return algorithm.Decision{}, store.ErrNoAlgorithm
	}
	l, err := s.limitFor(req.Algorithm)
	if err != nil {
		return algorithm.Decision{}, err
	}
	return s.decide(l, req.Algorithm, l.directFor(req.Algorithm), now, req.Key, req.Cost), nil
}

// decide is DecideOne once the request's limit is known.
func (s *Store) decide(l *limit, a algorithm.Algorithm, dir *algorithm.Direct, now int64, key string, cost int64) (d algorithm.Decision) {
	s.decideInto(&d, l, a, dir, now, key, cost)
	return d
}

// decideInto is decide writing its decision into *d. The decision goes
// straight from the algorithm into *d: passed back by value through the
// store's frames, the 64-byte Decision is copied several times, which
// costs a tracked key's decision about a tenth of its time. dir, when not
// nil, is a's Direct form, which a tracked key's state in its slot is
// decided with in place (see decideDirect).
func (s *Store) decideInto(d *algorithm.Decision, l *limit, a algorithm.Algorithm, dir *algorithm.Direct, now int64, key string, cost int64) {
	s.decideHashed(d, l, a, dir, now, s.hash(key), cost)
}

// decideHashed is decideInto for the key of hash h (0 for the empty key).
func (s *Store) decideHashed(d *algorithm.Decision, l *limit, a algorithm.Algorithm, dir *algorithm.Direct, now int64, h uint64, cost int64) {
	if h == 0 { // a zero Hashed: zero marks an empty slot, and no hash is zero
		h = s.hash("")
	}
	sh := s.shardOf(h)
	sh.mu.Lock()
	if l.retired.Load() { // rare: retired since it was resolved
		sh.mu.Unlock()
		var err error
		if l, err = s.lockLive(sh, l, a); err != nil {
			*d = algorithm.Decision{} // a's own Config and Words: cannot fail
			return
		}
		dir = l.directFor(a)
	}
	if dir == nil || !sh.decideDirect(d, l, dir, now, h, cost) {
		sh.decideLocked(d, l, a, now, h, cost)
	}
	sh.mu.Unlock()
}

// decideDirect decides the common case with dir: a tracked key that the
// eviction summary does not charge, in a table whose clock is current,
// its state where it lies when its layout allows (the state whole in the
// slot, or packed in one or two slot words: then on a copy on the stack).
// That is a counting algorithm's decision without the interface call, the
// scratch state and the copies of the general path. It reports whether it
// decided; if not, it has changed nothing but the key's last-use tick,
// which the general path sets alike. The shard's lock is held.
func (sh *shard) decideDirect(d *algorithm.Decision, l *limit, dir *algorithm.Direct, now int64, h uint64, cost int64) bool {
	if uint(l.id) >= uint(len(sh.tables)) {
		return false
	}
	t := sh.tables[l.id]
	if t == nil || now>>t.unitShift > t.latest {
		return false // no table yet, or its clock must advance first
	}
	sl := t.find(h)
	if sl < 0 {
		return false
	}
	b := sl * t.stride
	head := t.slots[b]
	if head&charged != 0 {
		return false
	}
	t.slots[b] = head&^tickMask | t.latest&tickMask // t.touch(sl)
	switch {
	case !t.packed && t.inline == l.words:
		dir.DecideInto(d, t.slots[b+1:b+1+t.inline:b+1+t.inline], now, cost)
	case t.packed && l.words == 2: // fixed-window: one slot word
		p := &t.slots[b+1]
		st := [2]int64{int64(uint64(*p) >> 32), *p & (half - 1)}
		dir.DecideInto(d, st[:], now, cost)
		if uint64(st[0]|st[1]) >= half { // a word below 0 or above 32 bits
			sh.putCopy(t, sl, st[:]) // converts the table
		} else {
			*p = st[0]<<32 | st[1]
		}
	case t.packed && l.words == 3: // weighted-window: two slot words
		p := t.slots[b+1 : b+3 : b+3]
		st := [3]int64{int64(uint64(p[0]) >> 32), p[0] & (half - 1), int64(uint64(p[1]) >> 32)}
		dir.DecideInto(d, st[:], now, cost)
		if uint64(st[0]|st[1]|st[2]) >= half {
			sh.putCopy(t, sl, st[:])
		} else {
			p[0], p[1] = st[0]<<32|st[1], st[2]<<32
		}
	default:
		return false
	}
	// The eviction summary reads the newest time a state was written at.
	sh.now = max(sh.now, now)
	return true
}

// putCopy is t.put(sl, st) by way of the shard's scratch state, so that st,
// which decideDirect keeps on its stack, does not escape with put's
// st (which goes to an interface method). The shard's lock is held.
func (sh *shard) putCopy(t *table, sl int, st []int64) {
	cp := sh.scratch[:len(st)]
	copy(cp, st)
	clear(cp[:t.put(sl, cp)])
}

// decideLocked is decideHashed's general case. The shard's lock is held.
func (sh *shard) decideLocked(d *algorithm.Decision, l *limit, a algorithm.Algorithm, now int64, h uint64, cost int64) {
	t := sh.table(l)
	// t.advance(now), by hand: the common case is two comparisons.
	sh.now = max(sh.now, now)
	if tick := now >> t.unitShift; tick > t.latest {
		t.advanceTo(tick)
	}
	sl := t.find(h)
	if sl < 0 {
		sl = sh.adopt(t, l, a, h, now)
	}
	if sl >= 0 {
		b := sl * t.stride
		head := t.slots[b]&^tickMask | t.latest&tickMask // t.touch(sl)
		t.slots[b] = head
		if head&charged == 0 {
			if t.narrow && l.narrowDec != nil && a == l.alg {
				// A narrow sliding-window state decided where it lies, in
				// the common case (pack.go).
				if nd, ok := l.narrowDec.DecideNarrow(t.slots[b+1:b+t.stride:b+t.stride], now, cost); ok {
					*d = nd
					return
				}
			}
			if t.packed {
				st := sh.scratch[:l.words:l.words]
				packed := t.slots[b+1 : b+t.stride : b+t.stride]
				t.unpack(st, packed)
				*d = a.Decide(st, now, cost)
				if !t.pack(packed, st) {
					t.put(sl, st) // converts the table
				}
				clear(st)
				return
			}
			if t.inline == l.words { // t.inPlace(sl), the common case
				*d = a.Decide(t.slots[b+1:b+1+t.inline:b+1+t.inline], now, cost)
				return
			}
			if st := t.inPlace(sl); st != nil {
				*d = a.Decide(st, now, cost)
				return
			}
			// A bounded-log key whose state is whole in the slot (its
			// later words zero), in the common case: decided there.
			if l.prefix != nil && head&outOfLine == 0 && a == l.alg &&
				l.prefix.DecideInto(d, t.slots[b+1:b+t.stride:b+t.stride], now, cost) {
				return
			}
		}
		st := t.load(sl, sh.scratch[:l.words])
		if t.slots[sl*t.stride]&charged == 0 {
			*d = a.Decide(st, now, cost)
		} else {
			*d = sh.decideCharged(a, st, t.chargeFor(sl, now), now, cost)
		}
		clear(st[:t.put(sl, st)]) // put knows where the nonzero words end
		return
	}
	// A never-seen key: decide on a zero state, charged what the eviction
	// summary holds for its hash, and keep the key only if the decision
	// was allowed, so rejected first requests cost no memory.
	st := sh.scratch[:l.words]
	c := t.chargeOf(h, now)
	*d = sh.decideCharged(a, st, c, now, cost)
	if d.Allowed && !allZero(st) {
		sl := t.insert(h)
		t.mark(sl, c)
		t.put(sl, st)
	}
	clear(st)
}

// decideCharged decides a request on st as if c more units had been
// counted at now, and if it is allowed counts it in st (without c).
func (sh *shard) decideCharged(a algorithm.Algorithm, st []int64, c, now, cost int64) algorithm.Decision {
	if c <= 0 {
		return a.Decide(st, now, cost)
	}
	cp := sh.chargeScratch[:len(st)]
	copy(cp, st)
	a.Record(cp, now, c)
	d := a.Decide(cp, now, cost)
	clear(cp)
	if d.Allowed {
		a.Decide(st, now, cost)
	}
	return d
}

// decideLeased is decideCharged that holds the units under lease id when
// id is not zero and a holds leases.
func (sh *shard) decideLeased(a algorithm.Algorithm, st []int64, c, now, cost int64, id lease.ID) algorithm.Decision {
	la, ok := a.(algorithm.Leaser)
	if !ok || id == (lease.ID{}) {
		return sh.decideCharged(a, st, c, now, cost)
	}
	if c <= 0 {
		return la.Acquire(st, now, cost, id)
	}
	cp := sh.chargeScratch[:len(st)]
	copy(cp, st)
	a.Record(cp, now, c)
	d := la.Acquire(cp, now, cost, id)
	clear(cp)
	if d.Allowed {
		la.Acquire(st, now, cost, id)
	}
	return d
}

// Decide decides every request in reqs at time now, writing one decision per
// request into out. Every request is decided first on a copy of its key's
// state; only if every non-Shadow request is allowed are the new states
// written back, so either all allowed requests are counted or none is.
// Requests that name the same limit and key see each other's effect, in
// order. The shards involved are locked together, in a fixed order, so the
// check and the commit are one atomic step.
func (s *Store) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	if len(out) != len(reqs) {
		return store.ErrOutLength
	}
	switch len(reqs) {
	case 0:
		return nil
	case 1:
		d, err := s.DecideOne(ctx, now, reqs[0])
		out[0] = d
		return err
	}
	return s.decideBatch(now, reqs, out, lease.ID{})
}

// Acquire implements store.Leaser: it is Decide, with the units of every
// allowed concurrency request held under lease id.
func (s *Store) Acquire(ctx context.Context, now int64, id lease.ID, reqs []store.Request, out []algorithm.Decision) error {
	if len(out) != len(reqs) {
		return store.ErrOutLength
	}
	if !id.Valid() {
		return lease.ErrInvalid
	}
	return s.decideBatch(now, reqs, out, id)
}

// decideBatch is Decide for any number of requests, holding concurrency
// units under lease id unless it is zero.
func (s *Store) decideBatch(now int64, reqs []store.Request, out []algorithm.Decision, id lease.ID) error {
	b := s.batchPool.Get().(*batch)
	defer s.batchPool.Put(b)
	// Lock each involved shard once, in index order, which rules out
	// deadlock between concurrent multi-shard decisions; resolve again if a
	// limit was retired before the locks were taken.
	for {
		if err := b.resolve(s, reqs); err != nil {
			return err
		}
		for _, si := range b.locked {
			s.shards[si].mu.Lock()
		}
		if !b.anyRetired() {
			break
		}
		for _, si := range b.locked {
			s.shards[si].mu.Unlock()
		}
	}
	defer func() {
		for _, si := range b.locked {
			s.shards[si].mu.Unlock()
		}
	}()
	b.load(reqs, now)
	commit := true
	for i := range reqs {
		it := &b.items[i]
		out[i] = it.sh.decideLeased(reqs[i].Algorithm, b.words[it.off:it.off+it.l.words], it.charge, now, reqs[i].Cost, id)
		if !out[i].Allowed && !reqs[i].Shadow {
			commit = false
		}
	}
	if commit {
		b.commit()
	}
	return nil
}

// ReleaseLease implements store.Leaser: it gives back what lease id holds
// in the keys of reqs whose algorithm holds leases, and reports whether
// any did.
func (s *Store) ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []store.Request) (bool, error) {
	released := false
	for i := range reqs {
		a, ok := reqs[i].Algorithm.(algorithm.Leaser)
		if !ok {
			continue
		}
		l, h, err := s.resolve("request", i, reqs[i].Algorithm, reqs[i].Key)
		if err != nil {
			return released, err
		}
		sh := s.shardOf(h)
		if l, err = s.lockLive(sh, l, reqs[i].Algorithm); err != nil {
			return released, err
		}
		if l.id < len(sh.tables) && sh.tables[l.id] != nil {
			t := sh.tables[l.id]
			t.advance(now)
			if sl := t.find(h); sl >= 0 {
				st := t.load(sl, sh.scratch[:l.words])
				if a.ReleaseLease(st, now, id) {
					released = true
					t.touch(sl)
					clear(st[:t.put(sl, st)])
				} else {
					clear(st)
				}
			}
		}
		sh.mu.Unlock()
	}
	return released, nil
}

// batch is the scratch space of one multi-request Decide.
type batch struct {
	items  []item
	locked []int // shard indexes, sorted
	words  []int64
}

type item struct {
	l      *limit
	h      uint64
	sh     *shard
	off    int   // offset of the state copy in batch.words
	same   int   // index of an earlier item with the same limit and key, or -1
	charge int64 // what the eviction summary charges the key
}

// resolve fills b's items and the sorted set of shards to lock.
func (b *batch) resolve(s *Store, reqs []store.Request) error {
	b.items = b.items[:0]
	b.locked = b.locked[:0]
	for i := range reqs {
		l, h, err := s.resolve("request", i, reqs[i].Algorithm, reqs[i].Key)
		if err != nil {
			return err
		}
		si := s.shardIndex(h)
		b.items = append(b.items, item{l: l, h: h, sh: &s.shards[si], same: -1})
		b.locked = append(b.locked, si)
	}
	slices.Sort(b.locked)
	b.locked = slices.Compact(b.locked)
	return nil
}

// anyRetired reports whether a limit of b's items was retired.
func (b *batch) anyRetired() bool {
	for i := range b.items {
		if b.items[i].l.retired.Load() {
			return true
		}
	}
	return false
}

// load copies each distinct (limit, key) state into b.words (a new key's
// charged as DecideOne would); duplicates share a copy.
func (b *batch) load(reqs []store.Request, now int64) {
	b.words = b.words[:0]
	for i := range b.items {
		it := &b.items[i]
		it.same, it.charge = -1, 0
		for j := range i {
			if b.items[j].l == it.l && b.items[j].h == it.h {
				it.same = j
				it.off = b.items[j].off
				it.charge = b.items[j].charge
				break
			}
		}
		if it.same >= 0 {
			continue
		}
		it.off = len(b.words)
		b.words = slices.Grow(b.words, it.l.words)[:it.off+it.l.words]
		st := b.words[it.off:]
		clear(st)
		t := it.sh.table(it.l)
		t.advance(now)
		sl := t.find(it.h)
		if sl < 0 {
			sl = it.sh.adopt(t, it.l, reqs[i].Algorithm, it.h, now)
		}
		if sl >= 0 {
			t.load(sl, st)
			it.charge = t.chargeFor(sl, now)
		} else {
			it.charge = t.chargeOf(it.h, now)
		}
	}
}

// commit writes each distinct state back, inserting new keys.
func (b *batch) commit() {
	for i := range b.items {
		it := &b.items[i]
		if it.same >= 0 {
			continue
		}
		st := b.words[it.off : it.off+it.l.words]
		t := it.sh.table(it.l)
		sl := t.find(it.h)
		if sl < 0 {
			if allZero(st) {
				continue
			}
			sl = t.insert(it.h)
			t.mark(sl, it.charge)
		} else {
			t.touch(sl)
		}
		t.put(sl, st)
	}
}
