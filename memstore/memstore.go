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
// its counters, and two rules with different Configs never share state. A
// table is compact, with no pointer-heavy struct per key:
//
//   - a dense slab of entries, each the key's 64-bit hash followed by the
//     algorithm's Words() state words, in flat []int64 chunks of 128
//     entries (so growing never copies the slab, and the slack is at most
//     one chunk);
//   - an open-addressing index ([]uint64, linear probing, power-of-two size,
//     at most 80% full) whose entries hold the entry's slab position, 8 more
//     bits of the hash (so a probe reads the slab only on a likely match)
//     and the key's last-use time in ticks of about 67 ms (to expire idle
//     keys and pick eviction victims without a third memory access).
//
// A decision on a tracked key thus reads two cache lines of the table: the
// index slot and the entry. A tracked key costs 8·(Words()+1) bytes of entry
// plus 10 to 20 bytes of index, and a little slack.
//
// # Identity by hash
//
// The store keeps the key's 64-bit hash, not the key. Two distinct keys that
// hash alike under the same Config share one counter. With n keys under one
// Config the chance that any two of them collide is about n²/2⁶⁵: one in a
// billion for 200,000 keys, one in a thousand for 200 million. A collision merges two clients' counts (the
// pair is limited together); it never loses a count. Because the seed is
// random per store and never leaves it, collisions cannot be provoked on
// purpose.
//
// # Expiry and the key bound
//
// A key whose last use is more than its algorithm's IdleAfter() ago is
// equivalent to a never-seen key, so the store may drop it. Idle keys are
// reclaimed lazily: a few are checked at each insertion, a table is swept
// whole before its index would grow, and Sweep reclaims all of them on
// demand. Options.MaxKeys bounds the number of tracked keys; a shard that is
// full evicts before it inserts, preferring an expired key and otherwise the
// least recently used of a small random sample. A flood of distinct keys
// therefore cannot grow memory without bound; it can only push out the
// least recently seen clients (whose counts restart from zero).
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// DefaultMaxKeys is the key bound of a Store whose Options.MaxKeys is zero.
// At 35 to 45 bytes a key (fixed-window, token-bucket, gcra,
// weighted-window) it holds 4 million keys in under 200 MB.
const DefaultMaxKeys = 1 << 22

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 16 per CPU (GOMAXPROCS), at least 64.
	Shards int
	// MaxKeys bounds the number of keys the store tracks, over all limits
	// together. Each shard holds at most MaxKeys/Shards (rounded up, and at
	// most 16,777,214) keys, and evicts before inserting beyond that, so
	// eviction can begin slightly before the store as a whole holds MaxKeys
	// keys. Zero means DefaultMaxKeys. Store.MaxKeys reports the bound in
	// force.
	MaxKeys int
}

// Store is an in-memory store.Store and store.Syncer. It is safe for
// concurrent use. The zero value is not usable; call New.
type Store struct {
	seed      maphash.Seed
	shards    []shard
	shift     uint // shard index = hash >> shift
	maxKeys   int
	recent    atomic.Pointer[limitCache]
	limitsMu  sync.Mutex
	limits    map[algorithm.Config]*limit
	batchPool sync.Pool // *batch
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Syncer = (*Store)(nil)
)

// Errors returned for bad requests.
var (
	// ErrNoAlgorithm is returned for a request whose Algorithm is nil.
	ErrNoAlgorithm = errors.New("memstore: request has no algorithm")
	// ErrOutLength is returned by Decide when out and reqs differ in length.
	ErrOutLength = errors.New("memstore: Decide needs len(out) == len(reqs)")
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
	perShard := min((maxKeys+n-1)/n, maxEntries)
	s := &Store{
		seed:    maphash.MakeSeed(),
		shards:  make([]shard, n),
		shift:   64 - shardBits,
		maxKeys: perShard * n,
		limits:  make(map[algorithm.Config]*limit),
	}
	for i := range s.shards {
		s.shards[i].max = perShard
		s.shards[i].rng = uint64(i)*0x9e3779b97f4a7c15 | 1
	}
	s.batchPool.New = func() any { return new(batch) }
	return s
}

// MaxKeys returns the most keys the store will track at once.
func (s *Store) MaxKeys() int { return s.maxKeys }

// Len returns the number of keys the store tracks now, over all limits,
// including idle keys not yet reclaimed.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every key that has been idle longer than its algorithm's
// IdleAfter() as of now (Unix nanoseconds), releases memory that tables no
// longer need, and returns the number of keys dropped. The store reclaims
// idle keys by itself as it inserts new ones; Sweep is for callers that want
// memory back sooner, such as a periodic janitor.
func (s *Store) Sweep(now int64) int {
	tick := tickOf(now)
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, t := range sh.tables {
			if t != nil {
				n += t.sweepAll(tick)
				t.shrink()
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// shardIndex returns the shard of hash h. With one shard the shift is 64,
// which Go defines to yield 0.
func (s *Store) shardIndex(h uint64) int { return int(h >> s.shift) }

func (s *Store) shardOf(h uint64) *shard { return &s.shards[s.shardIndex(h)] }

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// DecideOne decides req at time now and counts it if allowed. It allocates
// nothing when the key is already tracked. ctx is not consulted: an
// in-memory decision never blocks for long.
func (s *Store) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	if req.Algorithm == nil {
		return algorithm.Decision{}, ErrNoAlgorithm
	}
	l, err := s.limitFor(req.Algorithm)
	if err != nil {
		return algorithm.Decision{}, err
	}
	return s.decide(l, req.Algorithm, now, req.Key, req.Cost), nil
}

// decide is DecideOne once the request's limit is known.
func (s *Store) decide(l *limit, a algorithm.Algorithm, now int64, key string, cost int64) algorithm.Decision {
	h := s.hash(key)
	sh := s.shardOf(h)
	tick := tickOf(now)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table(l)
	if sl := t.find(h); sl >= 0 {
		d := a.Decide(t.stateAt(sl), now, cost)
		t.touch(sl, tick)
		return d
	}
	// A never-seen key: decide on a zero state and keep the key only if the
	// decision changed something, so rejected first requests cost no memory.
	st := sh.scratch[:l.words]
	clear(st)
	d := a.Decide(st, now, cost)
	if !allZero(st) {
		copy(t.stateAt(t.insert(h, tick)), st)
	}
	return d
}

// A Bound is a Store bound to one Algorithm, for a caller that always
// decides with the same one (a floodgate.Limiter): its Decide skips the
// lookup of the algorithm's limit that DecideOne makes on every call.
type Bound struct {
	s *Store
	a algorithm.Algorithm
	l *limit
}

// Bind returns s bound to a. It fails only as DecideOne would for a.
func (s *Store) Bind(a algorithm.Algorithm) (*Bound, error) {
	if a == nil {
		return nil, ErrNoAlgorithm
	}
	l, err := s.limitFor(a)
	if err != nil {
		return nil, err
	}
	return &Bound{s: s, a: a, l: l}, nil
}

// Decide decides a request of cost for key at time now and counts it if
// allowed; it is DecideOne for the bound algorithm and allocates nothing
// when the key is already tracked.
func (b *Bound) Decide(now int64, key string, cost int64) algorithm.Decision {
	return b.s.decide(b.l, b.a, now, key, cost)
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
		return ErrOutLength
	}
	switch len(reqs) {
	case 0:
		return nil
	case 1:
		d, err := s.DecideOne(ctx, now, reqs[0])
		out[0] = d
		return err
	}
	b := s.batchPool.Get().(*batch)
	defer s.batchPool.Put(b)
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
	// Lock each involved shard once, in index order, which rules out
	// deadlock between concurrent multi-shard decisions.
	slices.Sort(b.locked)
	b.locked = slices.Compact(b.locked)
	for _, si := range b.locked {
		s.shards[si].mu.Lock()
	}
	defer func() {
		for _, si := range b.locked {
			s.shards[si].mu.Unlock()
		}
	}()

	// Copy each distinct (limit, key) state into scratch; duplicates share it.
	b.words = b.words[:0]
	for i := range b.items {
		it := &b.items[i]
		for j := range i {
			if b.items[j].l == it.l && b.items[j].h == it.h {
				it.same = j
				it.off = b.items[j].off
				break
			}
		}
		if it.same >= 0 {
			continue
		}
		it.off = len(b.words)
		b.words = slices.Grow(b.words, it.l.words)[:it.off+it.l.words]
		st := b.words[it.off:]
		t := it.sh.table(it.l)
		if sl := t.find(it.h); sl >= 0 {
			copy(st, t.stateAt(sl))
		} else {
			clear(st)
		}
	}
	commit := true
	for i := range reqs {
		it := &b.items[i]
		out[i] = reqs[i].Algorithm.Decide(b.words[it.off:it.off+it.l.words], now, reqs[i].Cost)
		if !out[i].Allowed && !reqs[i].Shadow {
			commit = false
		}
	}
	if !commit {
		return nil
	}
	tick := tickOf(now)
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
			sl = t.insert(it.h, tick)
		} else {
			t.touch(sl, tick)
		}
		copy(t.stateAt(sl), st)
	}
	return nil
}

// Release gives back the units of reqs (see algorithm.Algorithm.Release).
// Keys the store does not track hold nothing, so they are skipped.
func (s *Store) Release(ctx context.Context, now int64, reqs []store.Request) error {
	tick := tickOf(now)
	for i := range reqs {
		a := reqs[i].Algorithm
		l, h, err := s.resolve("request", i, a, reqs[i].Key)
		if err != nil {
			return err
		}
		sh := s.shardOf(h)
		sh.mu.Lock()
		if l.id < len(sh.tables) && sh.tables[l.id] != nil {
			t := sh.tables[l.id]
			if sl := t.find(h); sl >= 0 {
				a.Release(t.stateAt(sl), now, reqs[i].Cost)
				t.touch(sl, tick)
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Sync merges each batch's events into the store with Algorithm.Record (at
// each event's own time) and sets the batch's State to a copy of the merged
// state. A batch without events only reads. It is the shared-store side of
// delayed synchronization when the nodes share one process.
func (s *Store) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	tick := tickOf(now)
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
		sh := s.shardOf(h)
		sh.mu.Lock()
		t := sh.table(l)
		sl := t.find(h)
		if sl < 0 && len(b.Events) > 0 {
			sl = t.insert(h, tick)
		}
		if sl >= 0 {
			st := t.stateAt(sl)
			for _, e := range b.Events {
				b.Algorithm.Record(st, e.Time, e.Cost)
			}
			if len(b.Events) > 0 {
				t.touch(sl, tick)
			}
			copy(b.State, st)
		} else {
			clear(b.State)
		}
		sh.mu.Unlock()
	}
	return nil
}

// A limit is one distinct algorithm.Config the store has seen.
type limit struct {
	id    int // index into shard.tables
	words int
	idle  int32 // idle ticks after which a key expires; 0 = never
	cfg   algorithm.Config
}

// limitCache maps the Algorithm values in use to their limit without
// hashing their Config. It is replaced, never modified. Only algorithms of
// comparable dynamic types are entered (the others take the slow path).
type limitCache struct {
	// The first few entries are also kept in slices and scanned: comparing
	// a handful of interfaces is cheaper than hashing one.
	algs   []algorithm.Algorithm
	limits []*limit
	m      map[algorithm.Algorithm]*limit
}

const (
	scanCached = 8
	// maxCached bounds the cache, which would otherwise keep every
	// Algorithm value ever seen (rule reloads make new ones); when full it
	// starts over.
	maxCached = 4096
)

// resolve returns the limit of a and the hash of key for element i of a
// batch call, naming the element as what (request, batch) in errors.
func (s *Store) resolve(what string, i int, a algorithm.Algorithm, key string) (*limit, uint64, error) {
	if a == nil {
		return nil, 0, fmt.Errorf("%s %d: %w", what, i, ErrNoAlgorithm)
	}
	l, err := s.limitFor(a)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %d: %w", what, i, err)
	}
	return l, s.hash(key), nil
}

// limitFor returns the limit of a's Config, registering it if new.
func (s *Store) limitFor(a algorithm.Algorithm) (*limit, error) {
	if c := s.recent.Load(); c != nil {
		// Cached algorithms have comparable types, so these comparisons
		// cannot panic: equal types are comparable types.
		for i, x := range c.algs {
			if x == a {
				return c.limits[i], nil
			}
		}
		if len(c.m) > len(c.algs) && reflect.TypeOf(a).Comparable() {
			if l, ok := c.m[a]; ok {
				return l, nil
			}
		}
	}
	return s.limitSlow(a)
}

func (s *Store) limitSlow(a algorithm.Algorithm) (*limit, error) {
	cfg := a.Config()
	words := a.Words()
	if words < 0 {
		return nil, fmt.Errorf("memstore: algorithm %s reports %d state words", a.Name(), words)
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	l, ok := s.limits[cfg]
	if !ok {
		l = &limit{id: len(s.limits), words: words, idle: idleTicks(a.IdleAfter()), cfg: cfg}
		s.limits[cfg] = l
	} else if l.words != words {
		return nil, fmt.Errorf("memstore: algorithm %s reports %d state words for a config seen with %d",
			a.Name(), words, l.words)
	}
	if !reflect.TypeOf(a).Comparable() {
		return l, nil
	}
	old := s.recent.Load()
	if old != nil {
		if _, ok := old.m[a]; ok {
			return l, nil // entered by a concurrent caller
		}
	}
	c := &limitCache{m: make(map[algorithm.Algorithm]*limit)}
	if old != nil && len(old.m) < maxCached {
		c.algs = append(c.algs, old.algs...)
		c.limits = append(c.limits, old.limits...)
		for k, v := range old.m {
			c.m[k] = v
		}
	}
	if len(c.algs) < scanCached {
		c.algs = append(c.algs, a)
		c.limits = append(c.limits, l)
	}
	c.m[a] = l
	s.recent.Store(c)
	return l, nil
}

// Time is kept per key in ticks of 2^26 ns (about 67 ms), truncated to 32
// bits; ages are compared as signed 32-bit differences, so they are exact up
// to about 4.5 years and time running backwards reads as a negative age.
const tickShift = 26

func tickOf(now int64) uint32 { return uint32(now >> tickShift) }

// idleTicks converts an IdleAfter duration to ticks, rounding up so a key is
// never dropped early. Zero or negative durations, and durations over about
// two years, mean never.
func idleTicks(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	t := (int64(d) + 1<<tickShift - 1) >> tickShift
	if t >= 1<<30 {
		return 0
	}
	return int32(t)
}

func allZero(st []int64) bool {
	for _, w := range st {
		if w != 0 {
			return false
		}
	}
	return true
}

// shard is one lock's worth of tables.
type shard struct {
	mu      sync.Mutex
	n       int // keys over all tables
	max     int // most keys this shard may hold
	rng     uint64
	tables  []*table // by limit.id
	scratch []int64  // zero state for deciding never-seen keys
	_       [48]byte // keep hot shards on separate cache lines
}

func (sh *shard) table(l *limit) *table {
	if l.id < len(sh.tables) {
		if t := sh.tables[l.id]; t != nil {
			return t
		}
	}
	if l.id >= len(sh.tables) {
		sh.tables = append(sh.tables, make([]*table, l.id+1-len(sh.tables))...)
	}
	t := &table{sh: sh, words: l.words, stride: l.words + 1, idle: l.idle}
	sh.tables[l.id] = t
	if len(sh.scratch) < l.words {
		sh.scratch = make([]int64, l.words)
	}
	return t
}

func (sh *shard) rand() uint64 {
	// xorshift64*: cheap, good enough to sample eviction candidates.
	x := sh.rng
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	sh.rng = x
	return x * 0x2545f4914f6cdd1d
}

// evictOne drops one key of the shard: an expired one if the sample holds
// one, else the least recently used of the sample.
func (sh *shard) evictOne(tick uint32) {
	const samples = 8
	var (
		victim *table
		vslot  int
		vage   int32
		vexp   bool
	)
	for range samples {
		// Pick a table in proportion to its keys, then a slot at random,
		// then the first used slot from there.
		r := int(sh.rand() % uint64(sh.n))
		for _, t := range sh.tables {
			if t == nil {
				continue
			}
			if r >= t.n {
				r -= t.n
				continue
			}
			mask := len(t.index) - 1
			sl := int(sh.rand()) & mask
			for t.index[sl] == 0 {
				sl = (sl + 1) & mask
			}
			age := int32(tick - tickOfEntry(t.index[sl]))
			exp := t.expired(sl, tick)
			if victim == nil || (exp && !vexp) || (exp == vexp && age > vage) {
				victim, vslot, vage, vexp = t, sl, age, exp
			}
			break
		}
	}
	if victim != nil {
		victim.remove(vslot)
	}
}

// An index entry is a uint64: the low 24 bits hold the entry's slab position
// + 1, the next 8 bits hold hash bits 32..39 (a tag that spares most slab
// reads on a probe), and the high 32 bits hold the key's last-use tick, so
// that a decision reads and updates it without touching another cache line.
// Zero is an empty slot.
const (
	posBits    = 24
	posMask    = 1<<posBits - 1
	tagMask    = 0xff << posBits
	maxEntries = posMask - 1
	// The index is grown when it would be more than loadNum/loadDen full.
	loadNum = 4
	loadDen = 5
)

func tagOf(h uint64) uint64 { return h >> 32 & 0xff << posBits }

func posOf(e uint64) int { return int(e&posMask) - 1 }

func tickOfEntry(e uint64) uint32 { return uint32(e >> 32) }

// Entries live in chunks of chunkLen; only the first chunk starts smaller
// and grows (by copying) until it is full size.
const (
	chunkBits = 7
	chunkLen  = 1 << chunkBits
	chunkMask = chunkLen - 1
)

// table holds one limit's keys within one shard.
type table struct {
	sh     *shard
	words  int
	stride int   // words + 1: the hash, then the state
	idle   int32 // see limit.idle
	n      int   // entries in use: slab positions 0..n-1
	index  []uint64
	chunks [][]int64 // chunk c holds positions c*chunkLen ... (c+1)*chunkLen-1
	cursor int       // next index slot the incremental sweep looks at
}

func (t *table) entry(pos int) []int64 {
	c := t.chunks[pos>>chunkBits]
	i := (pos & chunkMask) * t.stride
	return c[i : i+t.stride : i+t.stride]
}

func (t *table) hashAt(pos int) uint64 {
	return uint64(t.chunks[pos>>chunkBits][(pos&chunkMask)*t.stride])
}

// stateAt returns the state of the entry index slot sl points at.
func (t *table) stateAt(sl int) []int64 { return t.entry(posOf(t.index[sl]))[1:] }

// touch records a use at tick. A tick earlier than the one recorded (a
// caller whose clock is behind) leaves the recorded one.
func (t *table) touch(sl int, tick uint32) {
	e := t.index[sl]
	if int32(tick-tickOfEntry(e)) > 0 {
		t.index[sl] = e&(1<<32-1) | uint64(tick)<<32
	}
}

func (t *table) expired(sl int, tick uint32) bool {
	return t.idle > 0 && int32(tick-tickOfEntry(t.index[sl])) > t.idle
}

// find returns the index slot of hash h, or -1.
func (t *table) find(h uint64) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.index) - 1
	tag := tagOf(h)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		e := t.index[i]
		if e == 0 {
			return -1
		}
		if e&tagMask == tag && t.hashAt(posOf(e)) == h {
			return i
		}
	}
}

// slotOf returns the index slot that points at slab position pos, whose
// hash is h.
func (t *table) slotOf(h uint64, pos int) int {
	mask := len(t.index) - 1
	want := uint64(pos + 1)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		if t.index[i]&posMask == want {
			return i
		}
	}
}

// insert adds hash h, which must be absent, with a zero state and last use
// at tick, and returns its index slot. It evicts first if the shard is full.
func (t *table) insert(h uint64, tick uint32) int {
	sh := t.sh
	// Amortized reclamation: look at four index slots (half a cache line)
	// per insertion.
	t.sweepSome(4, tick)
	for sh.n >= sh.max && sh.n > 0 {
		if t.sweepSome(16, tick) == 0 {
			sh.evictOne(tick)
		}
	}
	if (t.n+1)*loadDen > len(t.index)*loadNum {
		// Before growing, drop idle keys: if that frees enough, the index
		// stays its size.
		if t.sweepAll(tick) == 0 || (t.n+1)*loadDen*8 > len(t.index)*loadNum*7 {
			t.rebuild(max(8, 2*len(t.index)))
		}
	}
	pos := t.n
	t.reserve(pos)
	e := t.entry(pos)
	e[0] = int64(h)
	clear(e[1:])
	t.n++
	sh.n++
	return t.place(h, tagOf(h)|uint64(pos+1)|uint64(tick)<<32)
}

// reserve makes room in the slab for an entry at position pos (= t.n).
func (t *table) reserve(pos int) {
	ci := pos >> chunkBits
	if ci < len(t.chunks) {
		c := t.chunks[ci]
		if (pos&chunkMask)*t.stride < len(c) {
			return
		}
		// Only the first chunk is ever short: double it.
		entries := min(chunkLen, 2*len(c)/t.stride)
		t.chunks[ci] = make([]int64, entries*t.stride)
		copy(t.chunks[ci], c)
		return
	}
	entries := chunkLen
	if ci == 0 {
		entries = 4
	}
	t.chunks = append(t.chunks, make([]int64, entries*t.stride))
}

// place puts index entry e, whose hash is h, in the first free slot of its
// probe run, and returns the slot.
func (t *table) place(h, e uint64) int {
	mask := len(t.index) - 1
	i := int(h) & mask
	for t.index[i] != 0 {
		i = (i + 1) & mask
	}
	t.index[i] = e
	return i
}

// rebuild moves the index to a new one of size slots.
func (t *table) rebuild(size int) {
	old := t.index
	t.index = make([]uint64, size)
	for _, e := range old {
		if e != 0 {
			t.place(t.hashAt(posOf(e)), e)
		}
	}
	t.cursor = 0
}

// remove drops the entry index slot sl points at, moving the slab's last
// entry into its place.
func (t *table) remove(sl int) {
	pos := posOf(t.index[sl])
	t.deleteSlot(sl)
	last := t.n - 1
	if pos != last {
		moved := t.entry(last)
		copy(t.entry(pos), moved)
		j := t.slotOf(uint64(moved[0]), last)
		t.index[j] = t.index[j]&^posMask | uint64(pos+1)
	}
	t.n--
	t.sh.n--
}

// deleteSlot empties index slot i and shifts later members of its probe run
// back, so lookups need no tombstones.
func (t *table) deleteSlot(i int) {
	mask := len(t.index) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		e := t.index[j]
		if e == 0 {
			break
		}
		home := int(t.hashAt(posOf(e))) & mask
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.index[i] = e
			i = j
		}
	}
	t.index[i] = 0
}

// sweepSome checks up to k index slots from the rolling cursor and drops
// the expired keys there; it returns how many it dropped.
func (t *table) sweepSome(k int, tick uint32) int {
	if t.idle == 0 || t.n == 0 {
		return 0
	}
	dropped := 0
	for ; k > 0; k-- {
		if t.cursor >= len(t.index) {
			t.cursor = 0
		}
		if t.index[t.cursor] != 0 && t.expired(t.cursor, tick) {
			// A later member of the probe run may shift into this
			// slot: look at it again next.
			t.remove(t.cursor)
			dropped++
		} else {
			t.cursor++
		}
	}
	return dropped
}

// sweepAll drops every expired key and returns how many it dropped.
func (t *table) sweepAll(tick uint32) int {
	if t.idle == 0 || t.n == 0 {
		return 0
	}
	dropped := 0
	for sl := 0; sl < len(t.index); {
		if t.index[sl] != 0 && t.expired(sl, tick) {
			t.remove(sl) // a later entry may shift into sl: look again
			dropped++
		} else {
			sl++
		}
	}
	return dropped
}

// shrink gives back memory a table no longer needs after many removals.
func (t *table) shrink() {
	if t.n == 0 {
		t.index, t.chunks, t.cursor = nil, nil, 0
		return
	}
	used := (t.n + chunkMask) >> chunkBits
	if used < len(t.chunks) {
		clear(t.chunks[used:])
		t.chunks = slices.Clip(t.chunks[:used])
	}
	size := len(t.index)
	for size > 8 && t.n*loadDen*4 < size*loadNum {
		size /= 2
	}
	if size != len(t.index) {
		t.rebuild(size)
	}
}

// batch is the scratch space of one multi-request Decide.
type batch struct {
	items  []item
	locked []int // shard indexes, sorted
	words  []int64
}

type item struct {
	l    *limit
	h    uint64
	sh   *shard
	off  int // offset of the state copy in batch.words
	same int // index of an earlier item with the same limit and key, or -1
}
