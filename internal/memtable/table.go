package memtable

import "math/bits"

// A slot is stride words of a table's slots array: the head word, then the
// state's first inline words. The head holds the key's hash with its low
// byte replaced by bookkeeping: bit 7 is set when the state lives out of
// line (then the slot's first state word is its index in table.big), bit 6
// when the eviction summary charges the key (see sketch.go), and bits 0-5
// are the key's last-use tick modulo 64. A zero head is an empty slot.
const (
	metaBits  = 8
	metaMask  = 1<<metaBits - 1
	outOfLine = 1 << 7
	charged   = 1 << 6
	tickMask  = charged - 1
	// maxInline is the longest state kept whole in the slot; longer ones
	// keep bigInline words there and move out of line when longer.
	maxInline = 7
	bigInline = 3
	// The table grows when more than loadNum/loadDen of its slots would be
	// in use.
	loadNum = 3
	loadDen = 4
	minCap  = 8
	// A full table grows by 1/growDiv, so it stays between 3/5 and 3/4
	// full: slot bytes over 0.6 to 0.75 per key.
	growDiv = 4
)

// Ticks. A table counts time in units of 2^unitShift ns, chosen so that the
// algorithm's idle time is at most idleSpan units; slots keep the tick
// modulo 64. The table sweeps itself whole at least every sweepSpan units,
// so no kept key is older than idleSpan+sweepSpan+idleSpan < 64 units and
// ages never wrap.
const (
	idleSpan  = 24
	sweepSpan = 12
	// lruShift is the unit of tables whose keys never go idle (about one
	// second); their ticks only rank eviction candidates.
	lruShift = 30
)

// table holds one limit's keys within one shard.
type table struct {
	sh     *shard
	l      *limit
	inline int  // state words kept in the slot
	packed bool // state words packed two to a slot word (pack.go)
	narrow bool // packed: 32-bit counts kept in 16 bits (pack.go)
	// slotBytes is what a slot is accounted against the shard's bytes:
	// a packed table's is its plain size, so that converting it never
	// takes the shard past its bound.
	slotBytes int64
	stride    int // 1 + inline
	cap       int // slots
	n         int // keys
	slots     []int64
	unitShift uint
	idleUnits int64     // ticks after which a key is idle; 0 = never
	latest    int64     // the newest tick seen
	sweptAt   int64     // the tick of the last whole sweep
	cursor    int       // next slot the incremental sweep looks at
	big       [][]int64 // out-of-line states; nil where unused
	freeRefs  []int64   // unused indexes of big
	bigLive   int       // big entries in use
	sketch    *sketch   // the eviction summary, made on first eviction
	// sketchUntil is the latest time a use added to sketch counts until.
	sketchUntil int64
	liveIdx     int // the table's index in shard.live
	shardIdx    int // the shard's index in the store
}

// slotView is what Bound.Prefetch reads of a table without the shard's
// lock: where its slots are and how many. A table publishes a new one
// whenever its slots move, once a Bound for its limit asks for them (see
// limit.views).
type slotView struct {
	slots  []int64
	cap    int
	stride int
}

// publish makes the table's current slots what Bound.Prefetch sees, if a
// Bound for its limit looks. The shard's lock is held.
func (t *table) publish() {
	if vs := t.l.views.Load(); vs != nil {
		(*vs)[t.shardIdx].Store(&slotView{slots: t.slots, cap: t.cap, stride: t.stride})
	}
}

func newTable(sh *shard, l *limit) *table {
	t := &table{sh: sh, l: l, inline: l.words, unitShift: lruShift}
	switch {
	case l.words > maxInline:
		t.inline = bigInline
	case l.narrow > 0:
		// 32-bit counts in 16 bits until a count does not fit; see pack.go.
		t.packed, t.narrow, t.inline = true, true, l.narrow
	case l.words >= 2 && !l.whole:
		// Two words to a slot word until a state does not fit; see pack.go.
		t.packed, t.inline = true, (l.words+1)/2
	}
	t.stride = 1 + t.inline
	t.slotBytes = int64(t.stride) * 8
	if t.packed {
		t.slotBytes = int64(1+l.words) * 8
	}
	if l.idle > 0 {
		// The smallest power-of-two unit that puts idle within idleSpan
		// units; idleUnits rounds up so no key is dropped early.
		t.unitShift = uint(bits.Len64(uint64(l.idle-1) / idleSpan))
		t.idleUnits = (int64(l.idle) + 1<<t.unitShift - 1) >> t.unitShift
	}
	return t
}

// home returns the first slot of hash h's probe run: bits 8..39 of the
// hash scaled to the table's size.
func (t *table) home(h uint64) int { return homeOf(h, t.cap) }

// homeOf is the home slot of hash h in a table of size slots.
func homeOf(h uint64, size int) int { return int((h >> metaBits & 0xffffffff) * uint64(size) >> 32) }

func (t *table) next(i int) int {
	if i++; i == t.cap {
		return 0
	}
	return i
}

// find returns the slot of hash h, or -1.
func (t *table) find(h uint64) int {
	slots, stride, n := t.slots, t.stride, t.cap
	if t.n == 0 {
		return -1
	}
	for i := homeOf(h, n); ; {
		w := uint64(slots[i*stride])
		if w&^metaMask == h {
			return i
		}
		if w == 0 {
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// touch records a use of slot sl at the table's newest tick.
func (t *table) touch(sl int) {
	p := &t.slots[sl*t.stride]
	*p = *p&^tickMask | t.latest&tickMask
}

// age returns how many ticks ago slot sl was last used.
func (t *table) age(sl int) int64 { return (t.latest - t.slots[sl*t.stride]) & tickMask }

func (t *table) expired(sl int) bool { return t.idleUnits > 0 && t.age(sl) > t.idleUnits }

// advance moves the table's clock to now (Unix nanoseconds) if it is newer,
// and returns the keys it dropped on the way: all of them when now is more
// than an idle time past the newest use, the idle ones when the table is
// due for its periodic sweep. A clock behind the table's does nothing.
func (t *table) advance(now int64) int {
	sh := t.sh
	sh.now = max(sh.now, now)
	if tick := now >> t.unitShift; tick > t.latest {
		return t.advanceTo(tick)
	}
	return 0
}

func (t *table) advanceTo(tick int64) int {
	if t.idleUnits == 0 {
		t.latest = tick
		return 0
	}
	if tick-t.latest > t.idleUnits {
		t.latest, t.sweptAt = tick, tick
		return t.dropAll()
	}
	t.latest = tick
	if tick-t.sweptAt > sweepSpan {
		t.sweptAt = tick
		return t.sweepAll()
	}
	return 0
}

// insert adds hash h, which must be absent, with a zero state used now,
// and returns its slot. It evicts first if the shard is full, and grows the
// table if it would be too full.
func (t *table) insert(h uint64) int {
	sh := t.sh
	t.sweepSome(4)
	for sh.n >= sh.maxKeys && sh.n > 0 {
		if t.sweepSome(16) == 0 {
			sh.evictOne(nil)
		}
	}
	swept := false
	for (t.n+1)*loadDen > t.cap*loadNum {
		newCap := max(minCap, t.cap+t.cap/growDiv)
		grow := int64(newCap-t.cap) * t.slotBytes
		if t.n > 0 && !sh.fits(grow) {
			sh.evictOne(t) // no room to grow: make room in this table
			continue
		}
		if !swept {
			// Before growing, drop idle keys: if that frees enough, the
			// table stays its size.
			swept = true
			if t.sweepAll() > 0 {
				continue
			}
		}
		t.rebuild(newCap)
	}
	i := t.home(h)
	for t.slots[i*t.stride] != 0 {
		i = t.next(i)
	}
	t.slots[i*t.stride] = int64(h) | t.latest&tickMask
	t.n++
	sh.n++
	return i
}

// rebuild moves the slots into a new array of size slots.
func (t *table) rebuild(size int) {
	old, oldCap := t.slots, t.cap
	t.sh.bytes += int64(size-oldCap) * t.slotBytes
	t.slots, t.cap, t.cursor = make([]int64, size*t.stride), size, 0
	defer t.publish()
	if size == 0 {
		t.slots = nil
		return
	}
	for j := range oldCap {
		src := old[j*t.stride : (j+1)*t.stride]
		if src[0] == 0 {
			continue
		}
		i := t.home(uint64(src[0]) &^ metaMask)
		for t.slots[i*t.stride] != 0 {
			i = t.next(i)
		}
		copy(t.slots[i*t.stride:], src)
	}
}

// remove drops the key in slot sl, freeing its out-of-line state, and
// shifts later members of its probe run back so lookups need no
// tombstones.
func (t *table) remove(sl int) {
	t.freeBig(sl)
	t.n--
	t.sh.n--
	i := sl
	for j := t.next(i); ; j = t.next(j) {
		w := uint64(t.slots[j*t.stride])
		if w == 0 {
			break
		}
		home := t.home(w &^ metaMask)
		// The slot at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			copy(t.slots[i*t.stride:(i+1)*t.stride], t.slots[j*t.stride:(j+1)*t.stride])
			i = j
		}
	}
	clear(t.slots[i*t.stride : (i+1)*t.stride])
}

// dropAll drops every key (all idle) and gives the slots back.
func (t *table) dropAll() int {
	n := t.n
	t.sh.n -= n
	t.sh.expired += int64(n)
	for _, b := range t.big {
		t.sh.bytes -= bigBytes(cap(b))
	}
	t.big, t.freeRefs, t.bigLive, t.n = nil, nil, 0, 0
	t.rebuild(0)
	// Every key was idle, so every use the sketch holds has stopped
	// counting (a use counts at most an idle time past its key's last use).
	if t.sketch != nil {
		t.sh.sketchBytes -= t.sketch.Bytes()
		t.sketch = nil
	}
	return n
}

// sweepSome checks up to k slots from the rolling cursor and drops the idle
// keys there; it returns how many it dropped.
func (t *table) sweepSome(k int) int {
	if t.idleUnits == 0 || t.n == 0 {
		return 0
	}
	dropped := 0
	for ; k > 0; k-- {
		if t.cursor >= t.cap {
			t.cursor = 0
		}
		if t.slots[t.cursor*t.stride] != 0 && t.expired(t.cursor) {
			// A later member of the probe run may shift into this
			// slot: look at it again next.
			t.remove(t.cursor)
			dropped++
		} else {
			t.cursor++
		}
	}
	t.sh.expired += int64(dropped)
	return dropped
}

// sweepAll drops every idle key and returns how many it dropped.
func (t *table) sweepAll() int {
	if t.idleUnits == 0 || t.n == 0 {
		return 0
	}
	dropped := 0
	for sl := 0; sl < t.cap; {
		if t.slots[sl*t.stride] != 0 && t.expired(sl) {
			t.remove(sl) // a later slot may shift into sl: look again
			dropped++
		} else {
			sl++
		}
	}
	t.sh.expired += int64(dropped)
	return dropped
}

// shrink gives back memory a table no longer needs after many removals.
func (t *table) shrink() {
	if t.n == 0 {
		for _, b := range t.big {
			t.sh.bytes -= bigBytes(cap(b))
		}
		t.big, t.freeRefs, t.bigLive = nil, nil, 0
		t.rebuild(0)
		return
	}
	size := t.cap
	for size > minCap && t.n*loadDen*3 < size*loadNum {
		size = max(minCap, size/2)
	}
	if size != t.cap {
		t.rebuild(size)
	}
}
