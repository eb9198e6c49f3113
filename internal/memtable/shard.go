package memtable

import (
	"sync"
	"time"
)

// shard is one lock's worth of tables.
type shard struct {
	mu       sync.Mutex
	n        int   // keys over all tables
	bytes    int64 // slots arrays and out-of-line buffers
	maxKeys  int
	maxBytes int64 // -1: no bound
	now      int64 // the newest time seen, Unix ns
	rng      uint64
	tables   []*table // by limit.id
	live     []*table // the tables in tables, in no order
	// orphans summarize what the keys of retired limits had used, by
	// kind of limit (see retire.go).
	orphans map[orphanKind]*orphanSummary
	scratch []int64 // all zero between uses
	// chargeScratch holds a charged copy of a state being decided.
	chargeScratch []int64
	// evictScratch holds an evicted key's state while it is summarized
	// (scratch may be in use by the decision that caused the eviction).
	evictScratch []int64
	// Bytes set aside for, and taken by, the tables' eviction summaries.
	sketchRoom  int64
	sketchBytes int64
	idx         int // the shard's index in the store
	evicted     int64
	expired     int64
	charged     int64
	_           [56]byte // 256 bytes: each shard starts its own cache line
}

func (sh *shard) table(l *limit) *table {
	if uint(l.id) < uint(len(sh.tables)) {
		if t := sh.tables[l.id]; t != nil {
			return t
		}
	}
	return sh.newTable(l)
}

// newTable makes l's table in the shard; table calls it the first time.
func (sh *shard) newTable(l *limit) *table {
	idx := sh.idx
	if l.id >= len(sh.tables) {
		sh.tables = append(sh.tables, make([]*table, l.id+1-len(sh.tables))...)
	}
	t := newTable(sh, l)
	t.shardIdx = idx
	sh.tables[l.id] = t
	t.liveIdx = len(sh.live)
	sh.live = append(sh.live, t)
	t.publish()
	sh.ensureScratch(l.words)
	return t
}

// fits reports whether extra more bytes keep the shard within its bound.
func (sh *shard) fits(extra int64) bool { return sh.maxBytes < 0 || sh.bytes+extra <= sh.maxBytes }

func (sh *shard) rand() uint64 {
	// xorshift64*: cheap, good enough to sample eviction candidates.
	x := sh.rng
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	sh.rng = x
	return x * 0x2545f4914f6cdd1d
}

// evictOne drops one key of the shard (of table only, if not nil), chosen
// from a small random sample: an idle one if there is one, else the one
// that has used the fewest units (whose record in the eviction summary
// costs other keys least), the least recently used among equals. A key
// that is not idle has its use written into the summary. It reports
// whether it dropped a key.
func (sh *shard) evictOne(only *table) bool {
	const samples = 8
	var (
		victim *table
		vslot  int
		vage   time.Duration
		vused  int64
	)
	for range samples {
		t := only
		if t == nil {
			t = sh.pickTable()
		}
		if t == nil || t.n == 0 {
			break
		}
		sl := int(sh.rand() % uint64(t.cap))
		for t.slots[sl*t.stride] == 0 {
			sl = t.next(sl)
		}
		age := time.Duration(t.age(sl) << t.unitShift)
		used := int64(-1) // idle
		if !t.expired(sl) {
			used, _ = sh.usage(t, sl)
		}
		if victim == nil || used < vused || (used == vused && age > vage) {
			victim, vslot, vage, vused = t, sl, age, used
		}
		if used < 0 {
			break
		}
	}
	if victim == nil {
		return false
	}
	if vused < 0 {
		sh.expired++
	} else {
		sh.record(victim, vslot)
		sh.evicted++
	}
	victim.remove(vslot)
	return true
}

// pickTable returns a table chosen in proportion to its keys.
func (sh *shard) pickTable() *table {
	if sh.n == 0 {
		return nil
	}
	r := int(sh.rand() % uint64(sh.n))
	for _, t := range sh.live {
		if r < t.n {
			return t
		}
		r -= t.n
	}
	return nil
}

// enforceBytes evicts keys with out-of-line states, other than the key of
// hash keep, until the shard is within its bytes or no such key is left.
// Keys kept in their slot free nothing when evicted, so only these count;
// of a small sample the least recently used goes.
func (sh *shard) enforceBytes(keep uint64) {
	for !sh.fits(0) {
		var (
			victim *table
			vslot  int
			vage   time.Duration
		)
		for range 8 {
			t := sh.live[int(sh.rand()%uint64(len(sh.live)))]
			if t.bigLive == 0 {
				continue
			}
			if sl := t.bigSlot(int(sh.rand()%uint64(t.cap)), keep); sl >= 0 {
				if age := time.Duration(t.age(sl) << t.unitShift); victim == nil || age > vage {
					victim, vslot, vage = t, sl, age
				}
			}
		}
		if victim == nil {
			if victim, vslot = sh.anyBig(keep); victim == nil {
				return
			}
		}
		if victim.expired(vslot) {
			sh.expired++
		} else {
			sh.record(victim, vslot)
			sh.evicted++
		}
		victim.remove(vslot)
	}
}

// bigSlot returns the first slot from sl on (cyclically) whose state is
// out of line and whose hash is not keep, or -1.
func (t *table) bigSlot(sl int, keep uint64) int {
	for range t.cap {
		w := uint64(t.slots[sl*t.stride])
		if w&outOfLine != 0 && w&^metaMask != keep {
			return sl
		}
		sl = t.next(sl)
	}
	return -1
}

// anyBig returns a table and slot whose state is out of line and whose
// hash is not keep, or nil.
func (sh *shard) anyBig(keep uint64) (*table, int) {
	for _, t := range sh.live {
		if t.bigLive > 0 {
			if sl := t.bigSlot(0, keep); sl >= 0 {
				return t, sl
			}
		}
	}
	return nil, 0
}

// ensureScratch makes the shard's scratch states at least words long.
func (sh *shard) ensureScratch(words int) {
	if len(sh.scratch) < words {
		sh.scratch = make([]int64, words)
		sh.chargeScratch = make([]int64, words)
	}
}
