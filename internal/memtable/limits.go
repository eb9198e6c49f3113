package memtable

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// A limit is one distinct algorithm.Config the store has seen: the store
// learns an algorithm's parameters from its exported Config and Words, and
// infers nothing else.
type limit struct {
	id    int // index into shard.tables
	words int
	idle  time.Duration // IdleAfter; 0 = never
	alg   algorithm.Algorithm
	full  int64 // units a zero state has available (for the eviction summary)
	// direct is alg's Direct form when that decides a whole state (the
	// counting algorithms), or nil.
	direct *algorithm.Direct
	// used is alg's bound on its state's nonzero words, or nil if it has
	// none (see table.put).
	used interface{ UsedWords([]int64) int }
	// prefix is alg's Direct form when that decides on a state's first
	// words (bounded-log), or nil: it decides a light key on the words kept
	// in its slot (see decideLocked).
	prefix *algorithm.Direct
	// whole is set when alg says its state words do not fit in 32-bit
	// halves (HalfWords false): its tables are never packed in halves (see
	// pack.go).
	whole bool
	// narrow, when not 0, is the words of the narrow form of alg's state
	// (32-bit sliding-window counts kept in 16 bits; see pack.go), which
	// its tables start in.
	narrow int
	// narrowDec decides on a narrow state in its slot in the common case
	// (algorithm.slidingWindow's DecideNarrow); set with narrow.
	narrowDec interface {
		DecideNarrow(s []int64, now, cost int64) (algorithm.Decision, bool)
	}
	// views holds, once a Bound asks for them (Store.views), the slots of
	// the limit's table in each shard, which the tables keep current.
	views atomic.Pointer[[]atomic.Pointer[slotView]]
	cfg   algorithm.Config
	// retired is set, with every shard locked, when the limit leaves the
	// registry; its id may then be another limit's. Code holding a limit
	// checks it under the shard's lock (Store.lockLive).
	retired atomic.Bool
	// pinned limits are never retired (a Bound holds them). The
	// registry's lock is held.
	pinned bool
	// latest and live are the retirement pass's scratch: the newest use
	// of any of the limit's tables (ns) and whether one holds anything.
	latest int64
	live   bool
	// fresh is set on limits registered since the last pass.
	fresh bool
	// kin is the limits of the same algorithm.Identity (kin.go), identity
	// that identity.
	kin      *kin
	identity algorithm.Config
}

// directForms returns a's Direct form (algorithm.Direct) as whole when it
// decides a whole state, as prefix when it decides on a state's first
// words; both nil when a has none.
func directForms(a algorithm.Algorithm) (whole, prefix *algorithm.Direct) {
	x, ok := a.(interface{ Direct() algorithm.Direct })
	if !ok {
		return nil, nil
	}
	dir := x.Direct()
	if dir.Prefix() {
		return nil, &dir
	}
	return &dir, nil
}

// directFor returns a's Direct form when a is the algorithm l was made
// for (another with an equal Config may be an implementation of its own),
// or nil.
func (l *limit) directFor(a algorithm.Algorithm) *algorithm.Direct {
	if l.direct != nil && a == l.alg {
		return l.direct
	}
	return nil
}

// limitCache maps the Configs in use to their limit. It is replaced, never
// modified. The first few entries are also kept in slices and scanned:
// comparing a handful of Configs is cheaper than hashing one. A limit
// retired since the cache was made is skipped (see Store.limitFor).
type limitCache struct {
	cfgs   []algorithm.Config
	limits []*limit
	m      map[algorithm.Config]*limit
}

const (
	scanCached = 8
	// maxCached bounds the cache. Limits beyond it are found in the
	// registry under its lock.
	maxCached = 4096
	// A limit is accounted limitBase bytes against the store's bytes (its
	// registry entry, its table header in a shard and the smallest slots
	// array) plus indexSlotBytes per shard (its entry in every shard's
	// table index, with the index's slack); TestLimitBytesCoverMeasuredHeap
	// measures both (2,020 to 2,100 bytes with 64 shards on linux/amd64,
	// against 2,176 accounted).
	limitBase      = 1152
	indexSlotBytes = 16
	// limitReserve: a store bounded in bytes sets aside 1/limitReserve
	// of them for its limits.
	limitReserve = 16
	// minLimits is the fewest live limits a store allows.
	minLimits = 256
	// minRetirePass is the fewest limits the registry holds before a new
	// one makes it look for limits to retire.
	minRetirePass = 64
)

// resolve returns the limit of a and the hash of key for element i of a
// batch call, naming the element as what (request, batch) in errors.
func (s *Store) resolve(what string, i int, a algorithm.Algorithm, key string) (*limit, uint64, error) {
	if a == nil {
		return nil, 0, fmt.Errorf("%s %d: %w", what, i, store.ErrNoAlgorithm)
	}
	l, err := s.limitFor(a)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %d: %w", what, i, err)
	}
	return l, s.hash(key), nil
}

// limitFor returns the live limit of a's Config, registering it if new. A
// caller that then locks a shard for it checks that it was not retired
// in between (limit.retired; see lockLive).
func (s *Store) limitFor(a algorithm.Algorithm) (*limit, error) {
	cfg := a.Config()
	if c := s.recent.Load(); c != nil {
		for i := range c.cfgs {
			if c.cfgs[i] == cfg {
				if l := c.limits[i]; !l.retired.Load() {
					return s.checkWords(l, a)
				}
				return s.limitSlow(a, cfg, false)
			}
		}
		if l, ok := c.m[cfg]; ok && !l.retired.Load() {
			return s.checkWords(l, a)
		}
	}
	return s.limitSlow(a, cfg, false)
}

// lockLive locks sh for the limit of a, which the caller resolved as l:
// if l was retired before the lock was taken, it resolves a again (a new
// limit of the same Config). It returns the live limit; sh is locked
// unless it returns an error.
func (s *Store) lockLive(sh *shard, l *limit, a algorithm.Algorithm) (*limit, error) {
	sh.mu.Lock()
	for l.retired.Load() {
		sh.mu.Unlock()
		var err error
		if l, err = s.limitFor(a); err != nil {
			return nil, err
		}
		sh.mu.Lock()
	}
	return l, nil
}

// checkWords refuses an algorithm whose state size differs from the one
// its Config was first seen with.
func (s *Store) checkWords(l *limit, a algorithm.Algorithm) (*limit, error) {
	if w := a.Words(); w != l.words {
		return nil, fmt.Errorf("memstore: algorithm %s reports %d state words for a config seen with %d",
			a.Name(), w, l.words)
	}
	return l, nil
}

// limitSlow finds or registers the limit of cfg in the registry; pin marks
// it never to be retired (a Bound holds it).
func (s *Store) limitSlow(a algorithm.Algorithm, cfg algorithm.Config, pin bool) (*limit, error) {
	words := a.Words()
	if words < 0 {
		return nil, fmt.Errorf("memstore: algorithm %s reports %d state words", a.Name(), words)
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	l, ok := s.limits[cfg]
	if ok {
		if l.words != words {
			return nil, fmt.Errorf("memstore: algorithm %s reports %d state words for a config seen with %d",
				a.Name(), words, l.words)
		}
		l.pinned = l.pinned || pin
		s.noteLookup()
		return l, nil
	}
	if len(s.limits) >= s.retireAt {
		s.retire()
	}
	l = newLimit(a, cfg, words, s.newID())
	l.pinned, l.fresh = pin, true
	s.limits[cfg] = l
	if cfg.Counter != "" {
		s.join(l)
	}
	s.noteLookup()
	return l, nil
}

// newLimit makes the limit of a, whose Config is cfg, with id.
func newLimit(a algorithm.Algorithm, cfg algorithm.Config, words, id int) *limit {
	l := &limit{id: id, words: words, idle: a.IdleAfter(), alg: a}
	l.full = available(a.Peek(make([]int64, words), 0, 1))
	l.direct, l.prefix = directForms(a)
	l.used, _ = a.(interface{ UsedWords([]int64) int })
	if hw, ok := a.(interface{ HalfWords() bool }); ok && !hw.HalfWords() {
		l.whole = true
	}
	if l.narrow = narrowWords(a, words); l.narrow > 0 {
		l.narrowDec, _ = a.(interface {
			DecideNarrow(s []int64, now, cost int64) (algorithm.Decision, bool)
		})
	}
	l.cfg = cfg
	// Each shard sizes its scratch states for l when it makes l's table
	// (shard.newTable), not before: a limit with a long state (a
	// concurrency limit's leases, a sliding log) costs scratch space only
	// in the shards that hold its keys.
	return l
}

// newID returns an unused limit id, reusing a retired limit's. The
// registry's lock is held.
func (s *Store) newID() int {
	if n := len(s.freeIDs); n > 0 {
		id := s.freeIDs[n-1]
		s.freeIDs = s.freeIDs[:n-1]
		return id
	}
	s.nextID++
	return s.nextID - 1
}

// noteLookup counts a look-up that missed the cache and makes a new cache
// once the misses reach its size, so that making caches costs O(1) per
// look-up, amortized. Beyond maxCached limits the cache keeps what it
// holds. The registry's lock is held.
func (s *Store) noteLookup() {
	s.misses++
	old := s.recent.Load()
	if old != nil && (s.misses < max(scanCached, len(old.m)) || len(s.limits) > maxCached) {
		return
	}
	s.rebuildCache()
}

// rebuildCache makes the cache anew from the registry, keeping the scanned
// entries that are still live first. The registry's lock is held.
func (s *Store) rebuildCache() {
	s.misses = 0
	c := &limitCache{m: make(map[algorithm.Config]*limit, min(len(s.limits), maxCached))}
	if old := s.recent.Load(); old != nil {
		for i, l := range old.limits {
			if !l.retired.Load() {
				c.cfgs = append(c.cfgs, old.cfgs[i])
				c.limits = append(c.limits, l)
			}
		}
	}
	for cfg, l := range s.limits {
		if len(c.m) >= maxCached {
			break
		}
		c.m[cfg] = l
		if len(c.cfgs) < scanCached && !slices.Contains(c.limits, l) {
			c.cfgs = append(c.cfgs, cfg)
			c.limits = append(c.limits, l)
		}
	}
	s.recent.Store(c)
}

// available returns the units a decision of cost 1 found available: its
// Remaining plus the unit it took when allowed.
func available(d algorithm.Decision) int64 {
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}
