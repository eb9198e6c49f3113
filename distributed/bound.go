package distributed

import (
	"hash/maphash"
	"time"
	"unsafe"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/memtable"
)

// defaultMaxKeys is Options.MaxKeys when left zero.
const defaultMaxKeys = 1 << 21

// DefaultMaxBytes is Options.MaxBytes when left zero: 512 MiB. A server
// that sizes its memory budget reads it.
const DefaultMaxBytes = 512 << 20

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
		t.note(s, victim, now)
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
	clean := len(e.events) == 0 && e.owed == 0
	return clean || t.evictFresh && e.queued() == 1 && len(e.history) == 0
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
	if ce, cv := e.queued() == 0, v.queued() == 0; ce != cv {
		return ce // a key whose count is in the store before one orphaned
	}
	if oe, ov := e.owed > 0, v.owed > 0; oe != ov {
		return !oe // a count orphaned before one lost
	}
	return e.last < v.last
}

// manyHits reports whether e has counted more than one request (pushed,
// queued or owed).
func (e *entry) manyHits() bool {
	q := e.queued()
	switch {
	case q > 1 || len(e.history) > 1 || e.owed > 1:
		return true
	case len(e.history) == 1:
		return e.history[0].Cost > 1 || q > 0
	default:
		return len(e.events) == 1 && e.events[0].Cost > 1
	}
}

// queued returns how many events e has to push: its queued events, and
// its owed cost as one.
func (e *entry) queued() int {
	if e.owed > 0 {
		return len(e.events) + 1
	}
	return len(e.events)
}

// remove deletes e (under k) from s and its accounting. The caller holds
// s's lock.
func (t *table) remove(s *shard, k entryKey, e *entry) {
	delete(s.m, k)
	e.gone = true // the near list drops it
	s.bytes -= sizeOf(e) + historyBytes*int64(len(e.history))
}

// The eviction summary. What an evicted key had used goes into a
// conservative count-min sketch (memtable.Sketch: sums in two epochs, each
// key on one cell per row), one per shard and per kind of limit (the idle
// time, and the allowance's scale); a key created later is charged the
// least of its cells, which is never below what its earlier lives used
// that still counts. The charge is kept beside the entry's state, not
// written into it (entry.charge): each decision adds it to a copy of the
// state, and the state keeps only what the node counted and pulled, which
// is what eviction adds to the sketch again, so charges never feed on
// themselves. On a delayed node the charge lasts until the key's first
// pull from the shared store, which holds the earlier lives' pushed counts
// (see Node.settleCharge); a key that shares all its cells with evicted
// keys is over-charged only until then.
//
// A shard's sketches take at most a quarter of its bytes, accounted in the
// table's bytes; each gets sketchPerKey cells per row for each key the
// shard can hold, at least minSketchRow (65,536 a row over the 64 shards).
const (
	sketchPerKey   = 4
	sketchReserve  = 4
	minSketchRow   = 1024
	sketchRowBytes = 12 // a cell in each of the sketch's 3 rows
)

// sketchKind says which of a shard's sketches a limit's keys use.
type sketchKind struct {
	idle    time.Duration
	quantum int64 // the allowance's scale: the full allowance / 4,096
}

// fullAllowance returns what an empty state of alg allows at now.
func fullAllowance(alg algorithm.Algorithm, now int64) int64 {
	return alg.Peek(make([]int64, alg.Words()), now, 1).Remaining + 1
}

// summaryHash is e's key and limit as the sketch sees them.
func (t *table) summaryHash(e *entry) uint64 {
	// Every share of a rule, and every limit of one identity (counterOf).
	return maphash.String(t.summarySeed, e.key) ^ maphash.Comparable(t.summarySeed, counterOf(e.alg))
}

// sketchFor returns the sketch of alg's kind in s, made if make is set and
// there is none. The caller holds s's lock.
func (t *table) sketchFor(s *shard, alg algorithm.Algorithm, now int64, create bool) *memtable.Sketch {
	full := fullAllowance(alg, now)
	kind := sketchKind{idle: alg.IdleAfter(), quantum: full >> 12}
	if k := s.sketches[kind]; k != nil || !create {
		return k
	}
	capacity := min(int64(t.shardKeys), t.shardBytes/entryBytes)
	room := min(t.shardBytes/sketchReserve-s.sketchBytes, max(capacity*sketchPerKey, minSketchRow)*sketchRowBytes)
	k := memtable.NewSketch(room, kind.idle, full)
	if s.sketches == nil {
		s.sketches = map[sketchKind]*memtable.Sketch{}
	}
	s.sketches[kind] = k
	s.sketchBytes += k.Bytes()
	s.bytes += k.Bytes()
	return k
}

// note adds what e used, evicted from s at now, to the summary. The
// caller holds s's lock.
func (t *table) note(s *shard, e *entry, now int64) {
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
	t.sketchFor(s, e.alg, now, true).Add(t.summaryHash(e), u, now+int64(e.alg.IdleAfter()))
}

// charge sets a new entry's charge to what the summary holds for its key.
// The caller holds the entry's shard lock.
func (t *table) charge(s *shard, e *entry, now int64) {
	if t.evicted.Load() == 0 {
		return
	}
	if k := t.sketchFor(s, e.alg, now, false); k != nil {
		if c := k.Charge(t.summaryHash(e), now); c > 0 {
			e.charge = c
			t.charged.Add(1)
		}
	}
}

// peekCharged is alg.Peek of one unit on st with charge counted.
func peekCharged(alg algorithm.Algorithm, st []int64, charge, now int64) algorithm.Decision {
	if charge <= 0 {
		return alg.Peek(st, now, 1)
	}
	cp := append([]int64(nil), st...)
	alg.Record(cp, now, charge)
	return alg.Decide(cp, now, 1)
}

// decideCharged decides a request on st as if charge more units had been
// counted at now, and if it is allowed counts it in st (without the
// charge).
func decideCharged(alg algorithm.Algorithm, st []int64, charge, now, cost int64) algorithm.Decision {
	if charge <= 0 {
		return alg.Decide(st, now, cost)
	}
	cp := append([]int64(nil), st...)
	alg.Record(cp, now, charge)
	d := alg.Decide(cp, now, cost)
	if d.Allowed {
		alg.Decide(st, now, cost)
	}
	return d
}
