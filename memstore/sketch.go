package memstore

import (
	"math/bits"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// The eviction summary. Eviction must never hand out allowance, so when a
// key that is not idle is evicted the shard writes what it had used into a
// small count-min-style table: sketchRows rows of cells, each key (limit
// and hash) mapped to one cell per row. A cell holds the most units any key
// mapped to it had used when evicted, and the latest time until which such
// a use still counts. A key the store creates is first charged, with the
// algorithm's Record at the time of its first request, the smallest of its
// cells' units that still count: at least what the key itself had used if
// it was evicted, since every cell it maps to holds at least that. So a
// returning evicted key is never under-counted. A key that shares all its
// cells with heavier evicted keys is over-counted until those uses stop
// counting: the price of a flood, paid by light keys, for at most one
// window (Stats.Charged counts the charged keys).
//
// A cell is a uint64: the units (saturating) in the high 32 bits and the
// time until which they count, in units of 2^30 ns rounded up, in the low
// 32 bits.
const (
	sketchRows      = 2
	sketchTimeShift = 30
	minSketchCells  = 64
	maxSketchCells  = 1 << 18
	// sketchShare is the share of a shard's bytes the summary may take.
	sketchShare = 16
)

// sketchCells returns the cells of one shard's summary: a cell per two
// keys the shard may hold, at most 1/sketchShare of its bytes, a power of
// two per row.
func sketchCells(perShardKeys int, perShardBytes int64) int {
	c := max(minSketchCells, perShardKeys/2)
	if perShardBytes > 0 {
		c = min(c, int(perShardBytes/sketchShare/8))
	}
	c = min(max(c, minSketchCells), maxSketchCells)
	row := 1 << (bits.Len(uint(c/sketchRows)) - 1)
	return row * sketchRows
}

// sketchIndex returns the cell of row r for hash h of limit l.
func (sh *shard) sketchIndex(l *limit, h uint64, r int) int {
	row := sh.sketchCells / sketchRows
	x := h ^ uint64(l.id+1)*0x9e3779b97f4a7c15
	mul := [sketchRows]uint64{0xff51afd7ed558ccd, 0xc4ceb9fe1a85ec53}
	return r*row + int((x*mul[r])>>(64-bits.Len(uint(row-1))))
}

// record writes what the key in slot sl of t has used into the summary.
func (sh *shard) record(t *table, sl int) {
	l := t.l
	if len(sh.evictScratch) < l.words {
		sh.evictScratch = make([]int64, l.words)
	}
	st := t.load(sl, sh.evictScratch[:l.words])
	now := max(sh.now, 0)
	d := l.alg.Peek(st, now, 1)
	clear(st)
	used := l.full - available(d)
	if used <= 0 {
		return
	}
	hold := max(d.ResetAfter, d.RetryAfter)
	if hold <= 0 {
		hold = l.idle // an algorithm that does not say: until the state is idle
	}
	if l.idle == 0 {
		// Units held until released (concurrency without a window):
		// remember them for a day.
		hold = max(hold, 24*time.Hour)
	}
	until := uint64(min(now+int64(hold), algorithm.MaxTime)+1<<sketchTimeShift-1) >> sketchTimeShift
	units := uint64(min(used, 1<<32-1))
	if sh.sketch == nil {
		sh.sketch = make([]uint64, sh.sketchCells)
	}
	h := uint64(t.slots[sl*t.stride]) &^ metaMask
	for r := range sketchRows {
		p := &sh.sketch[sh.sketchIndex(l, h, r)]
		cu, ct := *p>>32, *p&(1<<32-1)
		if ct*(1<<sketchTimeShift) <= uint64(now) {
			cu, ct = 0, 0 // the cell's uses no longer count
		}
		*p = max(cu, units)<<32 | max(ct, until)
	}
}

// charge records into st, the zero state of a key the store is about to
// create, the units the summary holds for it at now.
func (sh *shard) charge(l *limit, a algorithm.Algorithm, h uint64, now int64, st []int64) {
	if sh.sketch == nil {
		return
	}
	units := uint64(1<<64 - 1)
	for r := range sketchRows {
		c := sh.sketch[sh.sketchIndex(l, h, r)]
		u := c >> 32
		if (c&(1<<32-1))*(1<<sketchTimeShift) <= uint64(max(now, 0)) {
			u = 0
		}
		units = min(units, u)
	}
	if units > 0 {
		a.Record(st, now, int64(units))
		sh.charged++
	}
}
