package memtable

import (
	"math/bits"
	"time"
)

// The eviction summary. Eviction must never hand out allowance, so when a
// key that is not idle is evicted, its table adds the units it had used to
// a small count-min sketch: sketchRows rows of cells, each key mapped to
// one cell per row by its hash. A key the table creates later is charged
// the smallest of its cells' sums that still count: at least the sum of
// what the key itself used in earlier lives that still counts, since every
// cell it maps to holds that. So a key evicted any number of times is
// never under-counted.
//
// The charge is not written into the key's state: a charged key is marked
// in its slot, and each of its decisions adds the summary's current figure
// to a copy of its state (with the algorithm's Record, at the decision's
// time) to decide, then counts the request in the state itself. The state
// thus keeps only the key's own use, which is what eviction adds to the
// sketch again; charges never feed on themselves. The mark is cleared when
// the summary no longer charges the key.
//
// Time: a use counts until its window lets it go (the Peek decision's
// ResetAfter, at most the idle time). Cells keep two sums, for two
// consecutive epochs as long as the table's idle time; a use is added to
// the epoch its end falls in, and a charge at time t adds the sums of the
// epoch t falls in and the next. A sum thus lasts at most one epoch longer
// than its uses (an over-count, never an under-count), and a sustained
// flood cannot pile up sums older than two epochs. Adding is conservative
// (a cell rises only as far as the key's smallest cell requires), which
// keeps every estimate an upper bound and over-counts much less.
//
// The price is paid by keys that share all their cells with evicted keys:
// under a flood of distinct keys far beyond the table, a new key is charged
// about (evicted units per epoch)/(cells per row), for at most two epochs.
// Stats.Charged counts the charged decisions' keys.
//
// A cell is a uint32 of two halves, one per epoch parity: a 3-bit epoch
// tag and a 13-bit sum in quanta of the table's quantum (units rounded up;
// the quantum is 1 for allowances up to 4,096 units and at most 1/4,096 of
// the allowance above, so a saturated sum still exceeds any one key's use).
const (
	sketchRows = 3
	// sketchPerKey is the cells per row for each key the table held when
	// its sketch was made.
	sketchPerKey  = 2
	minSketchRow  = 64
	maxSketchRow  = 1 << 22
	sumBits       = 13
	sumMax        = 1<<sumBits - 1
	halfBits      = 16
	tagMask       = 1<<(halfBits-sumBits) - 1
	cellBytes     = 4
	sketchReserve = 4 // a shard bounded in bytes sets aside 1/sketchReserve for sketches
)

// Sketch is an eviction summary: a conservative count-min sketch of what
// evicted keys had used, in two epochs, which charges a key created again
// at least what its earlier lives used that still counts (Add at eviction,
// Charge at creation; keys are given by a 64-bit hash). The memory store
// keeps one per table; package distributed keeps them for a node's table.
// A Sketch is not safe for concurrent use: its owner locks it.
type Sketch struct {
	cells   []uint32
	rowBits uint
	epoch   uint64 // the epoch length in ns: the longest time a use counts
	quantum uint64 // units per step of a sum
}

// sketch is the name the memory store's own code uses.
type sketch = Sketch

func newSketch(t *table, room int64) *sketch {
	row := max(minSketchRow, sketchPerKey*t.n)
	if room > 0 {
		row = min(row, int(room/cellBytes/sketchRows))
	}
	return newSketchRow(row, t.l.idle, t.l.full)
}

// NewSketch returns an eviction summary of at most bytes bytes (at least
// 768) for uses that count for at most epoch (zero: a day), of keys whose
// allowance is at most full units.
func NewSketch(bytes int64, epoch time.Duration, full int64) *Sketch {
	return newSketchRow(int(min(bytes/cellBytes/sketchRows, maxSketchRow)), epoch, full)
}

func newSketchRow(row int, epoch time.Duration, full int64) *Sketch {
	row = min(max(row, minSketchRow), maxSketchRow)
	rowBits := uint(bits.Len(uint(row)) - 1)
	if epoch <= 0 {
		epoch = 24 * time.Hour
	}
	return &Sketch{
		cells:   make([]uint32, sketchRows<<rowBits),
		rowBits: rowBits,
		epoch:   uint64(epoch),
		quantum: 1 + uint64(max(full, 0))>>(sumBits-1),
	}
}

// Bytes returns the sketch's size.
func (k *Sketch) Bytes() int64 { return int64(len(k.cells)) * cellBytes }

// index returns the cell of row r for hash h.
func (k *Sketch) index(h uint64, r int) int {
	mul := [sketchRows]uint64{0xff51afd7ed558ccd, 0xc4ceb9fe1a85ec53, 0x9fb21c651e98df25}
	return r<<k.rowBits + int((h*mul[r])>>(64-k.rowBits))
}

// epochOf returns the epoch time t (ns) falls in, counting an epoch's end
// as inside it.
func (k *Sketch) epochOf(t int64) uint64 {
	return (uint64(max(t, 0)) + k.epoch - 1) / k.epoch
}

// Add adds units that count until the time until to hash h's cells. It
// updates conservatively: each cell only rises to what the key's smallest
// cell of that epoch reaches, which keeps every cell at or above the sum
// of its keys' uses and over-counts other keys less.
func (k *Sketch) Add(h uint64, units int64, until int64) {
	e := k.epochOf(until)
	q := min((uint64(units)+k.quantum-1)/k.quantum, sumMax)
	shift := uint(e&1) * halfBits
	var idx [sketchRows]int
	least := uint64(sumMax)
	for r := range sketchRows {
		idx[r] = k.index(h, r)
		least = min(least, k.sum(idx[r], shift, e))
	}
	want := min(least+q, sumMax)
	for _, i := range idx {
		if k.sum(i, shift, e) < want {
			half := e&tagMask<<sumBits | want
			k.cells[i] = uint32(uint64(k.cells[i])&^((1<<halfBits-1)<<shift) | half<<shift)
		}
	}
}

// sum returns cell i's sum for epoch e, kept in the half at shift.
func (k *Sketch) sum(i int, shift uint, e uint64) uint64 {
	half := uint64(k.cells[i]) >> shift & (1<<halfBits - 1)
	if half>>sumBits != e&tagMask {
		return 0
	}
	return half & sumMax
}

// maxCharge caps the units a summary charges a key, as the algorithms cap
// the counts Record merges (2^62), so that no sum of charges overflows.
const maxCharge = int64(1) << 62

// Charge returns the units the summary holds for hash h at time now: the
// smallest over its cells of the sums of the epoch now falls in and the
// next (uses that count past now lie in those two).
func (k *Sketch) Charge(h uint64, now int64) int64 {
	e := k.epochOf(now)
	least := uint64(1<<64 - 1)
	for r := range sketchRows {
		i := k.index(h, r)
		least = min(least, k.sum(i, uint(e&1)*halfBits, e)+k.sum(i, uint((e+1)&1)*halfBits, e+1))
	}
	return int64(min(least*k.quantum, uint64(maxCharge)))
}

// usage returns the units the key in slot sl of t has used (what a fresh
// state would need to be charged to be no less restrictive) and how long
// that use still counts.
func (sh *shard) usage(t *table, sl int) (int64, time.Duration) {
	l := t.l
	if len(sh.evictScratch) < l.words {
		sh.evictScratch = make([]int64, l.words)
	}
	st := t.load(sl, sh.evictScratch[:l.words])
	d := l.alg.Peek(st, max(sh.now, 0), 1)
	clear(st)
	used := l.full - available(d)
	if used <= 0 {
		return 0, 0
	}
	hold := max(d.ResetAfter, d.RetryAfter)
	if hold <= 0 || (l.idle > 0 && hold > l.idle) {
		hold = l.idle // an algorithm that does not say: until the state is idle
	}
	if l.idle == 0 {
		// Units held until released (concurrency without a window):
		// remember them for a day.
		hold = 24 * time.Hour
	}
	return used, hold
}

// record adds what the key in slot sl of t has used to t's sketch.
func (sh *shard) record(t *table, sl int) {
	used, hold := sh.usage(t, sl)
	if used <= 0 {
		return
	}
	if t.sketch == nil {
		room := int64(0)
		if sh.maxBytes >= 0 {
			room = max(0, sh.sketchRoom-sh.sketchBytes) * int64(t.n) / int64(max(1, sh.n))
			room = max(room, minSketchRow*sketchRows*cellBytes)
		}
		t.sketch = newSketch(t, room)
		sh.sketchBytes += t.sketch.Bytes()
	}
	now := max(sh.now, 0)
	t.sketch.Add(uint64(t.slots[sl*t.stride])&^metaMask, used, now+int64(hold))
	t.sketchUntil = max(t.sketchUntil, now+int64(hold))
}

// chargeOf returns what t's sketch and the shard's orphan summary for
// t's kind charge hash h at now.
func (t *table) chargeOf(h uint64, now int64) int64 {
	c := t.sh.orphanCharge(t.l, h, now)
	if t.sketch == nil {
		return c
	}
	return min(c+t.sketch.Charge(h, now), maxCharge)
}

// chargeFor returns what the sketch charges the key in slot sl at now,
// clearing the slot's mark once it charges nothing.
func (t *table) chargeFor(sl int, now int64) int64 {
	p := &t.slots[sl*t.stride]
	if *p&charged == 0 {
		return 0
	}
	c := t.chargeOf(uint64(*p)&^metaMask, now)
	if c == 0 {
		*p &^= charged
	}
	return c
}

// mark marks slot sl as charged if c > 0.
func (t *table) mark(sl int, c int64) {
	if c > 0 {
		t.slots[sl*t.stride] |= charged
		t.sh.charged++
	}
}
