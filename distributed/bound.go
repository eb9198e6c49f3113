package distributed

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Defaults of the node's table bound.
const (
	// DefaultMaxKeys is Options.MaxKeys when left zero.
	DefaultMaxKeys = 1 << 21
	// DefaultMaxBytes is Options.MaxBytes when left zero.
	DefaultMaxBytes = 512 << 20
)

// entryBytes is what the table accounts for an entry beyond its key, state
// and history: the entry, its map slot and key, rounded up.
var entryBytes = int64(unsafe.Sizeof(entry{})+unsafe.Sizeof(entryKey{})) + 128

// historyBytes is the size of one history event.
const historyBytes = int64(unsafe.Sizeof(pushedEvent{}))

// evictSample is how many entries eviction looks at to pick one.
const evictSample = 8

// maxEvictPerKey bounds the entries one new key evicts.
const maxEvictPerKey = 4

// sizeOf returns what the table accounts for e (without its history).
func sizeOf(e *entry) int64 {
	return entryBytes + int64(len(e.key)) + 8*int64(e.alg.Words())
}

// makeRoom evicts entries from s until one of need bytes fits under the
// shard's bounds, or no entry can go. Of evictSample entries it takes
// the first evictable one in evictBefore's order; what it used goes into
// the eviction summary, so the key comes back charged with it, and its
// queued events, if any, go on the shard's orphan list, to be pushed.
// The caller holds s's lock.
func (t *table) makeRoom(s *shard, need, now int64) {
	evicted := 0
	for len(s.m) > 0 && (len(s.m) >= t.shardKeys || s.bytes+need > t.shardBytes) {
		var victim *entry
		var vk entryKey
		seen := 0
		for k, e := range s.m {
			if t.evictable(e, now) && (victim == nil || evictBefore(e, victim)) {
				victim, vk = e, k
			}
			if seen++; seen == evictSample {
				break
			}
		}
		if victim == nil {
			t.overfull.Add(1)
			return
		}
		if evicted++; evicted > maxEvictPerKey {
			return // over the bound by what could not go: bounded work per key
		}
		t.summary.note(victim, now)
		if t.onEvict != nil {
			t.onEvict(s, victim, now)
		}
		t.remove(s, vk, victim)
		t.evicted.Add(1)
	}
}

// evictable reports whether e may be evicted at now: it has nothing to
// push (perhaps a pull pending), or (evictFresh) it was never synced and
// has one request queued, which then goes on the orphan list to be pushed,
// nothing in flight; and it was not decided on at now (a decision in
// progress may hold it).
func (t *table) evictable(e *entry, now int64) bool {
	if e.last >= now || e.inflight > 0 {
		return false
	}
	// Nothing queued: at most a pull is wanted (a key that rejected).
	clean := len(e.events) == 0
	return clean || t.evictFresh && len(e.events) == 1 && len(e.history) == 0
}

// evictBefore reports whether e goes before v: keys seen once before keys
// seen more than once (a flood's one-hit keys go first), keys with nothing
// queued before keys whose count would go on the orphan list (it is pushed
// all the same, but later, and its queue record outlives the entry), then
// the least recently used. Being near the limit gives no protection: under a key
// flood the eviction summary's charge puts most new keys near their limit;
// an evicted key near its limit is charged from the summary when it returns.
func evictBefore(e, v *entry) bool {
	if me, mv := e.manyHits(), v.manyHits(); me != mv {
		return !me
	}
	if ce, cv := len(e.events) == 0, len(v.events) == 0; ce != cv {
		return ce // a key whose count is in the store before one orphaned
	}
	return e.last < v.last
}

// manyHits reports whether e has counted more than one request (pushed or
// queued).
func (e *entry) manyHits() bool {
	switch {
	case len(e.events) > 1 || len(e.history) > 1:
		return true
	case len(e.history) == 1:
		return e.history[0].Cost > 1 || len(e.events) > 0
	default:
		return len(e.events) == 1 && e.events[0].Cost > 1
	}
}

// remove deletes e (under k) from s and its accounting. The caller holds
// s's lock.
func (t *table) remove(s *shard, k entryKey, e *entry) {
	delete(s.m, k)
	e.gone = true // the near list drops it
	s.bytes -= sizeOf(e) + historyBytes*int64(len(e.history))
}

// evictSummary remembers, conservatively, what evicted keys had used: a
// count-min sketch whose cells keep the largest usage evicted into them
// while it can still matter. A key's estimate (the least of its cells) is
// never below what it used when evicted, so a returning key is never given
// an allowance it had spent; a light key sharing cells with a heavy one
// may be charged too much, until the next sync pulls its real count
// (delayed) or the store decides again (centralized).
type evictSummary struct {
	seed  maphash.Seed
	cells [2][summaryWidth]summaryCell
	locks [64]sync.Mutex
	hits  atomic.Uint64 // keys that came back charged
}

const summaryWidth = 1 << 16

type summaryCell struct {
	used  int64 // largest usage evicted into the cell
	at    int64 // the latest eviction time
	until int64 // when that usage no longer matters
}

func (m *evictSummary) index(key string) [2]uint32 {
	h := maphash.String(m.seed, key)
	return [2]uint32{uint32(h) % summaryWidth, uint32(h>>32) % summaryWidth}
}

// note records what e used when evicted at now.
func (m *evictSummary) note(e *entry, now int64) {
	u := int64(0)
	if e.state != nil {
		u = used(e.alg, e.state, now)
	}
	if e.haveView {
		u = max(u, e.viewLimit-e.viewRemaining)
	}
	if u <= 0 {
		return
	}
	until := now + int64(e.alg.IdleAfter())
	for row, i := range m.index(e.key) {
		l := &m.locks[i%uint32(len(m.locks))]
		l.Lock()
		c := &m.cells[row][i]
		if c.until <= now {
			*c = summaryCell{}
		}
		c.used, c.at, c.until = max(c.used, u), max(c.at, now), max(c.until, until)
		l.Unlock()
	}
}

// estimate returns what key may have used when evicted, and when, or 0.
func (m *evictSummary) estimate(key string, now int64) (u, at int64) {
	u = -1
	for row, i := range m.index(key) {
		l := &m.locks[i%uint32(len(m.locks))]
		l.Lock()
		c := m.cells[row][i]
		l.Unlock()
		if c.until <= now {
			return 0, 0
		}
		if u < 0 || c.used < u {
			u = c.used
		}
		at = max(at, c.at)
	}
	return max(u, 0), at
}

// charge charges a new entry's state with what the summary says its key used
// before it was evicted. The caller holds the entry's shard lock.
func (t *table) charge(e *entry, now int64) {
	if t.evicted.Load() == 0 {
		return
	}
	if u, at := t.summary.estimate(e.key, now); u > 0 {
		e.alg.Record(e.state, at, u)
		t.summary.hits.Add(1)
	}
}
