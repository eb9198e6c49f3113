package memtable

import (
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Retiring limits. Every distinct algorithm.Config is a limit with its own
// tables, and callers choose Configs (a request's limit override makes one
// per value), so the registry is bounded: it holds at most maxLimits
// limits, each accounted Store.limitBytes against the store's bytes.
//
// When a new limit would take the registry to retireAt, a pass locks every
// shard and looks at every table: a table with no key left (idle keys are
// swept first) whose eviction summary charges nothing any more is dropped,
// and a limit with no table left is retired (it leaves the registry and its
// id is reused; a request that uses its Config later registers it anew,
// as a fresh limit, which is what it is: nothing of it still counts). If
// the registry is still full, the limits used least recently are retired
// with their keys: each table's summary and the use of every key it held
// that still counts are folded into the shard's orphan summary for that
// kind of limit (idle time, allowance scale), which charges every key that
// limits of the same kind create later in the shard. Eviction thus never
// hands out allowance, as with keys (see sketch.go); its price is that
// keys of other limits of the same kind may be charged units they did not
// use, for at most two idle times. The next pass comes when the registry
// has doubled, or is full again, so passes cost O(1) per new limit,
// amortized. A limit registered since the last pass is never retired as
// empty (its first request may be on its way to a shard).

// orphanKind is what an orphan summary is kept per: limits of one idle time
// whose summaries have one quantum.
type orphanKind struct {
	idle    time.Duration
	quantum uint64
}

const (
	// orphanRow is the cells per row of an orphan summary.
	orphanRow = 256
	// keepLimitsNum/keepLimitsDen of the bound is what a full registry is
	// cut back to.
	keepLimitsNum, keepLimitsDen = 3, 4
)

// kindOf returns the orphan kind of l: its idle time and its summary's
// quantum rounded up to a power of two.
func kindOf(l *limit) orphanKind {
	q := 1 + uint64(max(l.full, 0))>>(sumBits-1)
	return orphanKind{idle: l.idle, quantum: 1 << bits.Len64(q-1)}
}

// retire is the retirement pass. The registry's lock is held.
func (s *Store) retire() {
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for i := range s.shards {
			s.shards[i].mu.Unlock()
		}
		s.rebuildCache()
	}()
	for _, l := range s.limits {
		l.latest, l.live = 0, l.fresh
		l.fresh = false
	}
	for i := range s.shards {
		sh := &s.shards[i]
		for j := 0; j < len(sh.live); {
			t := sh.live[j]
			t.advance(sh.now)
			t.sweepAll()
			t.l.latest = max(t.l.latest, t.latest<<t.unitShift)
			if t.n == 0 && t.sketchSpent(sh.now) && !t.l.pinned {
				sh.dropTable(t) // moves the last live table to j
				continue
			}
			t.l.live = true
			j++
		}
		sh.dropSpentOrphans()
	}
	for cfg, l := range s.limits {
		if !l.live && !l.pinned {
			s.retireLimit(cfg, l)
		}
	}
	s.retireLeastRecent(len(s.limits) - s.maxLimits*keepLimitsNum/keepLimitsDen)
	n := len(s.limits)
	// At least n/4 new limits before the next pass, also when pinned
	// limits fill the registry.
	s.retireAt = max(min(s.maxLimits, max(minRetirePass, 2*n)), n+n/4+1)
}

// retireLeastRecent retires up to n limits that are not pinned, the least
// recently used first, folding what their tables count into the shards'
// orphan summaries. Every shard and the registry are locked.
func (s *Store) retireLeastRecent(n int) {
	if n <= 0 {
		return
	}
	var cands []*limit
	for _, l := range s.limits {
		if !l.pinned {
			if l.live && l.latest == 0 {
				l.latest = math.MaxInt64 // registered since the last pass: in use
			}
			cands = append(cands, l)
		}
	}
	slices.SortFunc(cands, func(a, b *limit) int { return int(min(max(a.latest-b.latest, -1), 1)) })
	for _, l := range cands[:min(n, len(cands))] {
		for i := range s.shards {
			sh := &s.shards[i]
			if l.id < len(sh.tables) && sh.tables[l.id] != nil {
				t := sh.tables[l.id]
				sh.orphan(t)
				sh.dropTable(t)
			}
		}
		s.retireLimit(l.cfg, l)
	}
}

// retireLimit takes l out of the registry and frees its id. Every shard
// and the registry are locked.
func (s *Store) retireLimit(cfg algorithm.Config, l *limit) {
	l.retired.Store(true)
	delete(s.limits, cfg)
	s.leave(l)
	s.freeIDs = append(s.freeIDs, l.id)
	s.retiredLimits++
}

// dropTable takes t out of its shard, giving back its memory. Keys still
// in it are dropped as they are. The shard's lock is held.
func (sh *shard) dropTable(t *table) {
	sh.n -= t.n
	for _, b := range t.big {
		if b != nil {
			sh.bytes -= bigBytes(cap(b))
		}
	}
	sh.bytes -= int64(t.cap) * t.slotBytes
	if t.sketch != nil {
		sh.sketchBytes -= t.sketch.Bytes()
	}
	last := len(sh.live) - 1
	sh.live[t.liveIdx] = sh.live[last]
	sh.live[t.liveIdx].liveIdx = t.liveIdx
	sh.live[last] = nil
	sh.live = sh.live[:last]
	sh.tables[t.l.id] = nil
}

// orphan folds t's summary, and the use of every key in t that still
// counts, into the shard's orphan summary for t's kind of limit. The
// shard's lock is held.
func (sh *shard) orphan(t *table) {
	now := max(sh.now, 0)
	var o *orphanSummary
	get := func() *orphanSummary {
		if o == nil {
			o = sh.orphanFor(t.l, true)
		}
		return o
	}
	if t.sketch != nil && !t.sketchSpent(now) {
		get().sketch.fold(t.sketch, now)
		o.until = max(o.until, t.sketchUntil)
	}
	for sl := range t.cap {
		head := uint64(t.slots[sl*t.stride])
		if head == 0 || t.expired(sl) {
			continue
		}
		used, hold := sh.usage(t, sl)
		if used <= 0 {
			continue
		}
		until := now + int64(hold)
		get().sketch.Add(head&^metaMask, used, until)
		o.until = max(o.until, until)
		sh.evicted++
	}
}

// orphanSummary is a shard's summary of what the keys of retired limits of
// one kind had used.
type orphanSummary struct {
	sketch *Sketch
	until  int64 // the latest time a use added to it counts until
}

// orphanFor returns the shard's orphan summary for l's kind, making it if
// make is set (else nil if there is none). The shard's lock is held.
func (sh *shard) orphanFor(l *limit, make bool) *orphanSummary {
	k := kindOf(l)
	if o := sh.orphans[k]; o != nil || !make {
		return o
	}
	if sh.orphans == nil {
		sh.orphans = map[orphanKind]*orphanSummary{}
	}
	sk := newSketchRow(orphanRow, l.idle, 0)
	sk.quantum = k.quantum
	o := &orphanSummary{sketch: sk}
	sh.orphans[k] = o
	sh.sketchBytes += sk.Bytes()
	return o
}

// dropSpentOrphans drops the orphan summaries that charge nothing any more.
// The shard's lock is held.
func (sh *shard) dropSpentOrphans() {
	for k, o := range sh.orphans {
		if o.sketch.spent(o.until, sh.now) {
			sh.sketchBytes -= o.sketch.Bytes()
			delete(sh.orphans, k)
		}
	}
}

// orphanCharge returns what the shard's orphan summary for l's kind charges
// hash h at now. The shard's lock is held.
func (sh *shard) orphanCharge(l *limit, h uint64, now int64) int64 {
	if len(sh.orphans) == 0 {
		return 0
	}
	if o := sh.orphanFor(l, false); o != nil {
		return o.sketch.Charge(h, now)
	}
	return 0
}

// sketchSpent reports whether t's summary charges nothing at now or later.
func (t *table) sketchSpent(now int64) bool {
	return t.sketch == nil || t.sketch.spent(t.sketchUntil, now)
}

// spent reports whether a summary whose uses count at most until charges
// nothing at now or later: now's epoch is past until's.
func (k *Sketch) spent(until, now int64) bool { return k.epochOf(now) > k.epochOf(until) }

// fold adds src's sums that still count at now into k, which has the same
// epoch length: a key's cells in k receive at least the sums of its cells
// in src (a cell of a row of 2^b cells stands for the cells of a longer
// row whose index begins with the same b bits, and for a part of a
// shorter row's cell), rounded up to k's quantum.
func (k *Sketch) fold(src *Sketch, now int64) {
	e := k.epochOf(now)
	for _, ep := range [2]uint64{e, e + 1} {
		shift := uint(ep&1) * halfBits
		for r := range sketchRows {
			for i := range 1 << src.rowBits {
				v := src.sum(r<<src.rowBits+i, shift, ep)
				if v == 0 {
					continue
				}
				q := min((v*src.quantum+k.quantum-1)/k.quantum, sumMax)
				var lo, hi int
				if k.rowBits >= src.rowBits {
					lo, hi = i<<(k.rowBits-src.rowBits), (i+1)<<(k.rowBits-src.rowBits)
				} else {
					lo = i >> (src.rowBits - k.rowBits)
					hi = lo + 1
				}
				for j := lo; j < hi; j++ {
					c := r<<k.rowBits + j
					sum := min(k.sum(c, shift, ep)+q, sumMax)
					half := ep&tagMask<<sumBits | sum
					k.cells[c] = uint32(uint64(k.cells[c])&^((1<<halfBits-1)<<shift) | half<<shift)
				}
			}
		}
	}
}
