// Package memtable is the memory store's implementation: the sharded
// tables behind memstore.Store, and the hot path a floodgate.Limiter takes
// through a Bound. Package memstore documents the layout and the bounds.
package memtable

import (
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/floodgate-dev/floodgate/algorithm"
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
	// algorithm.Config is accounted 1,152 bytes plus 16 per shard, 2,176
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
	kins          map[algorithm.Config]*kin // by identity (kin.go)
	freeIDs       []int                     // ids of retired limits, for reuse
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
		kins:     make(map[algorithm.Config]*kin),
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
