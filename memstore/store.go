// Package memstore is Floodgate's in-memory counter store: the default store
// of a Limiter, and the shared store that several delayed-synchronization
// nodes in one process can exchange counts with.
//
// # Layout
//
// A Store is split into a power-of-two number of shards, each with its own
// mutex. A key's shard is picked by the top bits of a 64-bit hash of the key
// (hash/maphash, with a seed chosen per store, so outsiders cannot aim keys
// at one shard or one probe chain).
//
// Inside a shard there is one table per distinct algorithm.Config: state
// identity is (Config, key), so a rule reload that keeps a rule's Config keeps
// its counters, and two rules with different Configs never share state.
//
// A table is one flat array of slots with open addressing (linear
// probing, at most 3/4 full, any size, grown by a quarter). A slot is one
// word holding 56 bits of the key's hash and 8 bits of bookkeeping (the
// last-use time, whether the state is out of line, whether the eviction
// summary charges the key), followed by the state: up to seven words in
// the slot itself. A decision on a tracked key whose state fits
// there reads and writes one place in memory: the hash, the last-use time
// and the state lie side by side, usually within one cache line. A
// token-bucket or gcra key takes a 24-byte slot; a fixed-window key a
// 16-byte one and a weighted-window key a 24-byte one, their state words
// packed two to a word (see pack.go). A sliding-window key with 12 slices
// takes a 40-byte slot: its counts are 16 bits each below a limit of
// 65,536, and above it the table keeps its 32-bit counts in 16 bits until
// one passes 65,535 (then 64 bytes; see pack.go).
//
// A Bound (how a floodgate.Limiter uses the store) decides the counting
// algorithms' tracked keys with their direct form (algorithm.Direct) in the
// slot itself, and lets its caller start loading a key's slot before the
// clock read (Bound.Prefetch), so that the one cache miss overlaps it.
//
// Larger states (algorithms whose Words() exceeds seven, such as
// bounded-log and sliding-log) keep three words in the slot. The store
// keeps a state only up to its last nonzero word and hands it back padded
// with zeros, so a state whose words past the third are zero stays in the
// slot (a bounded-log key with at most m units in its window); a longer
// one keeps its first two words there and the rest in a buffer of its own
// sized to its length (see state.go). A bounded-log key whose state is
// whole in the slot is decided there in the common case (bounded-log's
// algorithm.Direct); others are copied out, decided and stored back up
// to their last nonzero word, which the algorithm bounds (UsedWords) so
// the store need not scan every word.
//
// # Identity by hash
//
// The store keeps the key's hash, not the key. Two distinct keys that hash
// alike under the same Config share one counter. The slot keeps 56 bits of
// the hash and the shard index fixes the top bits, so with n keys under one
// Config the chance that any two collide is below n²/2⁵⁷: about one in 3
// million for 200,000 keys, one in 9,000 for 4 million. A collision merges
// two clients' counts (the pair is limited together); it never loses a
// count. Because the seed is random per store and never leaves it,
// collisions cannot be provoked on purpose.
//
// # Expiry, bounds and eviction
//
// A key whose last use is more than its algorithm's IdleAfter() ago is
// equivalent to a never-seen key, so the store may drop it. Idle keys are
// reclaimed lazily: a few are checked at each insertion, a table is swept
// whole before it would grow and at least every half idle period, and
// Sweep reclaims all of them on demand.
//
// Options.MaxKeys bounds the number of tracked keys and Options.MaxBytes
// the bytes of the tables and out-of-line states together. A shard that is
// full evicts before it inserts: of a small random sample, an idle key,
// else the one that has used the fewest units, the least recently used
// among equals. Eviction never hands out allowance: what an evicted key had
// used, and until when, goes into a small conservative summary per table
// (see sketch.go), and a key created later is charged what the summary
// says for its hash. A returning evicted key is therefore never
// under-counted; a new key whose hash meets evicted keys' entries in the
// summary may be charged more than it used, so under a flood some light
// clients lose part of their allowance for up to two windows.
// Stats counts evictions and charges.
package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// DefaultMaxKeys is the key bound of a Store whose Options.MaxKeys is zero.
// At 25 to 36 bytes a key (fixed-window, token-bucket, gcra,
// weighted-window; BENCHMARKS.md) it holds 4 million keys in at most
// about 150 MB.
const DefaultMaxKeys = 1 << 22

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 16 per CPU (GOMAXPROCS), at least 64.
	Shards int
	// MaxKeys bounds the number of keys the store tracks, over all limits
	// together. Each shard holds at most MaxKeys/Shards (rounded up) keys,
	// and evicts before inserting beyond that, so eviction can begin
	// slightly before the store as a whole holds MaxKeys keys. Zero means
	// DefaultMaxKeys. Store.MaxKeys reports the bound in force.
	MaxKeys int
	// MaxBytes bounds the memory of the store's tables, out-of-line states,
	// eviction summary and limits, over all limits together, in bytes. A
	// sixteenth is set aside for the limits (each distinct
	// algorithm.Config is accounted 1 KiB plus 16 bytes per shard, 2 KiB
	// with 64 shards; at least 256 limits are kept: see retire.go), and
	// each shard may use an equal share of the rest. Zero means no bound in bytes (MaxKeys still
	// applies). The Go runtime's own overhead (garbage not yet collected,
	// allocator slack) comes on top; see docs/operations.md.
	MaxBytes int64
}

// Store is an in-memory store.Store and store.Syncer. It is safe for
// concurrent use. The zero value is not usable; call New.
type Store struct {
	seed     maphash.Seed
	shards   []shard
	shift    uint // shard index = hash >> shift
	maxKeys  int
	maxBytes int64
	recent   atomic.Pointer[limitCache]
	limitsMu sync.Mutex
	// The registry of limits (limits.go, retire.go), under limitsMu.
	limits        map[algorithm.Config]*limit
	freeIDs       []int // ids of retired limits, for reuse
	nextID        int
	misses        int // look-ups that missed the cache since it was made
	maxLimits     int // the most limits the registry holds (pinned ones aside)
	retireAt      int // the registry's size that starts a retirement pass
	retiredLimits int64
	limitBytes    int64     // what a limit is accounted (limitBase and its index slots)
	batchPool     sync.Pool // *batch
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Syncer = (*Store)(nil)
)

// New returns an empty store configured by o.
func New(o Options) *Store {
	n := o.Shards
	if n <= 0 {
		n = max(64, 16*runtime.GOMAXPROCS(0))
	}
	n = min(n, 1<<16)
	shardBits := uint(bits.Len(uint(n - 1)))
	n = 1 << shardBits
	maxKeys := o.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	perShard := (maxKeys + n - 1) / n
	s := &Store{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, n),
		shift:    64 - shardBits,
		maxKeys:  perShard * n,
		maxBytes: max(0, o.MaxBytes),
		limits:   make(map[algorithm.Config]*limit),
	}
	// Limits are bounded by the bytes set aside for them, or else by a
	// share of the keys (a limit holds at least one key to be kept).
	s.limitBytes = limitBase + indexSlotBytes*int64(n)
	s.maxLimits = max(minLimits, maxKeys/64)
	limitRoom := int64(0)
	if s.maxBytes > 0 {
		limitRoom = s.maxBytes / limitReserve
		s.maxLimits = max(minLimits, int(limitRoom/s.limitBytes))
	}
	s.retireAt = min(s.maxLimits, minRetirePass)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.maxKeys = perShard
		sh.maxBytes = -1
		if s.maxBytes > 0 {
			// The summaries' and the limits' room is set aside from the
			// start, so making them later cannot push the store over.
			sh.sketchRoom = s.maxBytes / int64(n) / sketchReserve
			sh.maxBytes = s.maxBytes/int64(n) - sh.sketchRoom - limitRoom/int64(n)
		}
		sh.rng = uint64(i)*0x9e3779b97f4a7c15 | 1
		sh.idx = i
	}
	s.batchPool.New = func() any { return new(batch) }
	return s
}

// MaxKeys returns the most keys the store will track at once.
func (s *Store) MaxKeys() int { return s.maxKeys }

// MaxBytes returns the store's bound in bytes, or 0 if it has none.
func (s *Store) MaxBytes() int64 { return s.maxBytes }

// Len returns the number of keys the store tracks now, over all limits,
// including idle keys not yet reclaimed.
func (s *Store) Len() int { return int(s.Stats().Keys) }

// Stats is a snapshot of a Store's size and of what its bounds cost.
type Stats struct {
	// Keys is the number of keys tracked, idle ones not yet reclaimed
	// included.
	Keys int64
	// Bytes is the memory of the tables, out-of-line states and eviction
	// summary, as the store accounts it against MaxBytes (a packed table
	// at its plain size; see pack.go).
	Bytes int64
	// Evicted counts keys dropped to keep within MaxKeys or MaxBytes while
	// not idle; their use went into the eviction summary.
	Evicted int64
	// Expired counts idle keys reclaimed (each equivalent to a fresh key).
	Expired int64
	// Charged counts keys the eviction summary charged units when they
	// were created.
	Charged int64
}

// Stats returns the store's counters, summed over its shards.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += int64(sh.n)
		st.Bytes += sh.bytes + sh.sketchBytes
		st.Evicted += sh.evicted
		st.Expired += sh.expired
		st.Charged += sh.charged
		sh.mu.Unlock()
	}
	s.limitsMu.Lock()
	st.Bytes += int64(len(s.limits)) * s.limitBytes
	s.limitsMu.Unlock()
	return st
}

// Sweep drops every key that has been idle longer than its algorithm's
// IdleAfter() as of now (Unix nanoseconds), releases memory that tables no
// longer need, and returns the number of keys dropped. The store reclaims
// idle keys by itself as it inserts new ones; Sweep is for callers that want
// memory back sooner, such as a periodic janitor.
func (s *Store) Sweep(now int64) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, t := range sh.live {
			n += t.advance(now)
			n += t.sweepAll()
			t.shrink()
		}
		sh.mu.Unlock()
	}
	return n
}

// shardIndex returns the shard of hash h. With one shard the shift is 64,
// which Go defines to yield 0.
func (s *Store) shardIndex(h uint64) int { return int(h >> s.shift) }

func (s *Store) shardOf(h uint64) *shard { return &s.shards[s.shardIndex(h)] }

// hash returns key's hash with its low byte cleared for the slot's
// bookkeeping and never zero above it (zero marks an empty slot).
func (s *Store) hash(key string) uint64 {
	h := maphash.String(s.seed, key) &^ metaMask
	if h == 0 {
		h = 1 << metaBits
	}
	return h
}

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
	if sl := t.find(h); sl >= 0 {
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

// Release gives back the units of reqs (see algorithm.Algorithm.Release).
// Keys the store does not track hold nothing, so they are skipped.
func (s *Store) Release(ctx context.Context, now int64, reqs []store.Request) error {
	for i := range reqs {
		a := reqs[i].Algorithm
		l, h, err := s.resolve("request", i, a, reqs[i].Key)
		if err != nil {
			return err
		}
		sh := s.shardOf(h)
		if l, err = s.lockLive(sh, l, a); err != nil {
			return err
		}
		if l.id < len(sh.tables) && sh.tables[l.id] != nil {
			t := sh.tables[l.id]
			t.advance(now)
			if sl := t.find(h); sl >= 0 {
				st := t.load(sl, sh.scratch[:l.words])
				a.Release(st, now, reqs[i].Cost)
				t.touch(sl)
				clear(st[:t.put(sl, st)])
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Reset forgets key's state under a (store.Resetter): its next request
// starts with the whole allowance. Under memory pressure the eviction
// summary may still charge the key for uses of evicted keys that share
// its summary cells, as it charges any new key.
func (s *Store) Reset(ctx context.Context, a algorithm.Algorithm, key string) error {
	l, h, err := s.resolve("key", 0, a, key)
	if err != nil {
		return err
	}
	sh := s.shardOf(h)
	if l, err = s.lockLive(sh, l, a); err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if l.id < len(sh.tables) && sh.tables[l.id] != nil {
		if t := sh.tables[l.id]; t.find(h) >= 0 {
			t.remove(t.find(h))
		}
	}
	return nil
}

// Sync merges each batch's events into the store with Algorithm.Record (at
// each event's own time) and sets the batch's State to a copy of the merged
// state. A batch without events only reads. It is the shared-store side of
// delayed synchronization when the nodes share one process.
func (s *Store) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	for i := range batches {
		b := &batches[i]
		l, h, err := s.resolve("batch", i, b.Algorithm, b.Key)
		if err != nil {
			return err
		}
		if cap(b.State) >= l.words {
			b.State = b.State[:l.words]
		} else {
			b.State = make([]int64, l.words)
		}
		clear(b.State)
		sh := s.shardOf(h)
		if l, err = s.lockLive(sh, l, b.Algorithm); err != nil {
			return err
		}
		t := sh.table(l)
		t.advance(now)
		sl := t.find(h)
		var c int64
		if sl >= 0 {
			t.load(sl, b.State)
			c = t.chargeFor(sl, now)
		} else {
			c = t.chargeOf(h, now)
		}
		for _, e := range b.Events {
			b.Algorithm.Record(b.State, e.Time, e.Cost)
		}
		if len(b.Events) > 0 {
			if sl < 0 {
				sl = t.insert(h)
				t.mark(sl, c)
			} else {
				t.touch(sl)
			}
			t.put(sl, b.State)
		}
		if c > 0 {
			// The node decides on what it reads: it must see the charge,
			// also for a key the store no longer holds.
			b.Algorithm.Record(b.State, now, c)
		}
		sh.mu.Unlock()
	}
	return nil
}

func allZero(st []int64) bool {
	for _, w := range st {
		if w != 0 {
			return false
		}
	}
	return true
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
		if sl := t.find(it.h); sl >= 0 {
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
