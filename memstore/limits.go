package memstore

import (
	"fmt"
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
	// direct is alg's Direct form, or nil if it has none.
	direct *algorithm.Direct
	// used is alg's bound on its state's nonzero words, or nil if it has
	// none (see table.put).
	used interface{ UsedWords([]int64) int }
	// prefix is alg's LogPrefix form (bounded-log), or nil: it decides a
	// light key on the words kept in its slot (see decideLocked).
	prefix *algorithm.LogPrefix
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
// comparing a handful of Configs is cheaper than hashing one.
type limitCache struct {
	cfgs   []algorithm.Config
	limits []*limit
	m      map[algorithm.Config]*limit
}

const (
	scanCached = 8
	// maxCached bounds the cache, which would otherwise keep every Config
	// ever seen (rule reloads make new ones); when full it starts over.
	maxCached = 4096
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

// limitFor returns the limit of a's Config, registering it if new.
func (s *Store) limitFor(a algorithm.Algorithm) (*limit, error) {
	cfg := a.Config()
	if c := s.recent.Load(); c != nil {
		for i := range c.cfgs {
			if c.cfgs[i] == cfg {
				return s.checkWords(c.limits[i], a)
			}
		}
		if l, ok := c.m[cfg]; ok {
			return s.checkWords(l, a)
		}
	}
	return s.limitSlow(a, cfg)
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

func (s *Store) limitSlow(a algorithm.Algorithm, cfg algorithm.Config) (*limit, error) {
	words := a.Words()
	if words < 0 {
		return nil, fmt.Errorf("memstore: algorithm %s reports %d state words", a.Name(), words)
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	l, ok := s.limits[cfg]
	if !ok {
		l = &limit{id: len(s.limits), words: words, idle: a.IdleAfter(), alg: a}
		l.full = available(a.Peek(make([]int64, words), 0, 1))
		if dir, ok := algorithm.DirectOf(a); ok {
			l.direct = &dir
		}
		l.used, _ = a.(interface{ UsedWords([]int64) int })
		if p, ok := algorithm.LogPrefixOf(a); ok {
			l.prefix = &p
		}
		if hw, ok := a.(interface{ HalfWords() bool }); ok && !hw.HalfWords() {
			l.whole = true
		}
		if l.narrow = narrowWords(a, words); l.narrow > 0 {
			l.narrowDec, _ = a.(interface {
				DecideNarrow(s []int64, now, cost int64) (algorithm.Decision, bool)
			})
		}
		// Each shard sizes its scratch states for l when it makes l's table
		// (shard.newTable), not before: a limit with a long state (a
		// concurrency limit's leases, a sliding log) costs scratch space
		// only in the shards that hold its keys.
		s.limits[cfg] = l
	} else if l.words != words {
		return nil, fmt.Errorf("memstore: algorithm %s reports %d state words for a config seen with %d",
			a.Name(), words, l.words)
	}
	old := s.recent.Load()
	if old != nil {
		if _, ok := old.m[cfg]; ok {
			return l, nil // entered by a concurrent caller
		}
	}
	c := &limitCache{m: make(map[algorithm.Config]*limit)}
	if old != nil && len(old.m) < maxCached {
		c.cfgs = append(c.cfgs, old.cfgs...)
		c.limits = append(c.limits, old.limits...)
		for k, v := range old.m {
			c.m[k] = v
		}
	}
	if len(c.cfgs) < scanCached {
		c.cfgs = append(c.cfgs, cfg)
		c.limits = append(c.limits, l)
	}
	c.m[cfg] = l
	s.recent.Store(c)
	return l, nil
}

// available returns the units a decision of cost 1 found available: its
// Remaining plus the unit it took when allowed.
func available(d algorithm.Decision) int64 {
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}
