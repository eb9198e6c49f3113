package memstore

import "github.com/floodgate-dev/floodgate/algorithm"

// Packed tables. A table whose algorithm keeps two to seven state words
// starts packed: the state words go two to a slot word, as 32-bit halves
// (first word high), so a fixed-window key (window number, count) takes a
// 16-byte slot instead of 24 and a weighted-window key (window number and
// two counts) 24 bytes instead of 32. The table is a third or a quarter
// smaller, and a 16-byte slot never spans two cache lines. The store
// learns nothing about what the words mean: the first state that does not
// fit (a word below zero or at least 2^32, such as a time in nanoseconds)
// converts the table, in place and for good, to the plain layout of one
// slot word per state word. Fixed-window and weighted-window states (a
// window number and counts of at most algorithm.MaxLimit) fit while there
// have been fewer than 2^32 windows since 1970: with windows of a second or
// longer, until 2106. The buckets' states are times in nanoseconds, so
// their tables convert on their first key. An algorithm whose state words
// are bit fields that use the whole word says so (HalfWords() false, as
// sliding-window does) and its tables are never packed in halves: that
// would make the layout depend on the clock (a 32-bit sliding-window count
// fits a half only at even ring positions). Sliding-window tables with
// 32-bit counts are packed by count instead (narrow tables, below). A
// packed table is accounted against Options.MaxBytes at its plain size
// (Stats.Bytes too), so a conversion, which may come late in a table's
// life, never takes the store past its bound.

const half = 1 << 32

// packState packs st into dst, which has (len(st)+1)/2 words, and reports
// whether every word fit; dst is unchanged if not.
func packState(dst, st []int64) bool {
	var or uint64
	for _, w := range st {
		or |= uint64(w)
	}
	if or >= half {
		return false
	}
	for i := range dst {
		lo := int64(0)
		if 2*i+1 < len(st) {
			lo = st[2*i+1]
		}
		dst[i] = st[2*i]<<32 | lo
	}
	return true
}

// unpackState unpacks src into dst, which has Words() words.
func unpackState(dst, src []int64) {
	for i, w := range src {
		dst[2*i] = int64(uint64(w) >> 32)
		if 2*i+1 < len(dst) {
			dst[2*i+1] = w & (half - 1)
		}
	}
}

// unpackAll converts a packed table to the plain layout. Every slot keeps
// its index (the probe positions depend only on the table's size), so a
// slot number held by a caller stays valid.
func (t *table) unpackAll() { t.convert(false) }

// loosen converts a packed table whose layout does not hold st: a compact
// one to the narrow layout when its limit has one and st fits it, else
// (and any other packed table) to the plain layout.
func (t *table) loosen(st []int64) {
	if t.compact && t.l.narrow > 0 {
		var tmp [maxInline]int64
		if packNarrow(tmp[:t.l.narrow], st) {
			t.convert(true)
			return
		}
	}
	t.convert(false)
}

// convert rewrites every slot in the narrow layout (narrow) or the plain
// one, for good. Every slot keeps its index. A state the narrow layout
// does not hold (a compact table's never fails to fit) makes it the plain
// layout instead.
func (t *table) convert(narrow bool) {
	from := *t // the old layout, to unpack the old slots with
	t.packed, t.narrow, t.compact, t.inline = false, false, false, t.l.words
	if narrow {
		t.packed, t.narrow, t.inline = true, true, t.l.narrow
	}
	t.stride = 1 + t.inline
	defer t.publish()
	if from.slots == nil {
		return
	}
	t.slots = make([]int64, t.cap*t.stride)
	st := make([]int64, t.l.words)
	for i := range t.cap {
		h := from.slots[i*from.stride]
		if h == 0 {
			continue
		}
		t.slots[i*t.stride] = h
		clear(st)
		from.unpack(st, from.slots[i*from.stride+1:(i+1)*from.stride])
		dst := t.slots[i*t.stride+1 : (i+1)*t.stride]
		if !narrow {
			copy(dst, st)
		} else if !packNarrow(dst, st) {
			*t = from // the old layout again, then the plain one
			t.convert(false)
			return
		}
	}
}

// pack packs st into dst, a packed slot's state words, in the table's
// packed form, and reports whether st fit; dst is unchanged if not.
func (t *table) pack(dst, st []int64) bool {
	switch {
	case t.compact:
		return t.packCompact(dst, st)
	case t.narrow:
		return packNarrow(dst, st)
	}
	return packState(dst, st)
}

// unpack unpacks src, a packed slot's state words, into dst, which has
// Words() words and is all zero.
func (t *table) unpack(dst, src []int64) {
	switch {
	case t.compact:
		t.unpackCompact(dst, src)
	case t.narrow:
		unpackNarrow(dst, src)
	default:
		unpackState(dst, src)
	}
}

// Narrow tables. A sliding-window state with 32-bit counts (a limit of
// 65,536 or more) is its newest slice's number and the counts two to a
// word: 7 words with 12 slices, a 64-byte slot. Most keys count far fewer
// than 65,536 units in a slice, so such a table is narrow (from the start
// when it has no compact form, below; else once a count passes the
// compact form's 14 bits): the slice
// number whole, the counts four to a word in 16 bits each, at the same
// ring positions (1+ceil(N/4) words: 4 with 12 slices, a 40-byte slot,
// the same as a limit below 65,536 gives). Whether a state fits depends on
// its counts only, never on the clock. The first state with a count above
// 65,535 converts the table for good to the plain layout (unpackAll),
// exactly as a packed table converts. Until then the common decision is
// made on the narrow words in the slot (the algorithm's DecideNarrowInto,
// which declines a request that would take a count past 16 bits); the
// others unpack the slot to the algorithm's own words, decide and pack
// them back. The algorithm's state format, which other stores share, is
// unchanged.
const narrowMask = 0xffff0000_ffff0000 // a 32-bit count's upper 16 bits, in both halves

// narrowWords returns the words of a's narrow state, or 0 if a's tables
// are not kept narrow: a's counts are not 32-bit fields, its state is too
// long to lie whole in a slot, or narrow counts would not save a word.
func narrowWords(a algorithm.Algorithm, words int) int {
	cf, ok := a.(interface{ CountFields() (n, bits int) })
	if !ok || words > maxInline {
		return 0
	}
	n, bits := cf.CountFields()
	if bits != 32 || words != 1+(n+1)/2 || 1+(n+3)/4 >= words {
		return 0
	}
	return 1 + (n+3)/4
}

// packNarrow packs st (32-bit counts) into dst (16-bit counts), which has
// 1+ceil(N/4) words, and reports whether every count fit; dst is
// unchanged if not.
func packNarrow(dst, st []int64) bool {
	var or uint64
	for _, w := range st[1:] {
		or |= uint64(w)
	}
	if or&narrowMask != 0 {
		return false
	}
	dst[0] = st[0]
	for j := 1; j < len(dst); j++ { // counts 4j-4..4j-1: st[2j-1] and st[2j]
		lo, hi := uint64(st[2*j-1]), uint64(0)
		if 2*j < len(st) {
			hi = uint64(st[2*j])
		}
		dst[j] = int64(lo&0xffff | lo>>32<<16 | (hi&0xffff)<<32 | hi>>32<<48)
	}
	return true
}

// unpackNarrow unpacks src (16-bit counts) into dst (32-bit counts), which
// has Words() words.
func unpackNarrow(dst, src []int64) {
	dst[0] = src[0]
	for j := 1; j < len(src); j++ {
		w := uint64(src[j])
		dst[2*j-1] = int64(w&0xffff | w>>16&0xffff<<32)
		if 2*j < len(dst) {
			dst[2*j] = int64(w>>32&0xffff | w>>48<<32)
		}
	}
}

// Compact tables. A sliding-window state with 9 to 12 slices (to 24 with
// 16-bit counts) whose counts are at most algorithm.CompactMaxCount
// (16,383) is kept in its compact form (the algorithm's
// DecideCompactInto): the counts in 14 bits, four to a word, and the
// newest slice's number as a 24-bit offset from the table's epoch, in the
// top bytes of the first three words. With 12 slices that is 3 words, a
// 32-byte slot (never across two cache lines), where the narrow and the
// 16-bit plain layouts take 40 bytes. Such a table starts compact; the
// first state that does not fit (a count above 16,383, or a newest slice
// before the epoch or more than 2^24-1 slices after it) converts it for
// good: to the narrow layout when the limit has one (32-bit counts) and
// the state fits it, else to the plain layout. The epoch is set by the
// table's first key, 2^20 slices before its newest slice (room for keys
// whose clocks are behind), and again whenever the table holds one key:
// with slices of 5 minutes the offset lasts 150 years, with slices of a
// tenth of a second 18 days of keys that never all go idle. The decision
// on a compact state is made where it lies, in the common case; the
// others unpack it to the algorithm's words, decide and pack it back. The
// algorithm's state format is unchanged.

// compactWords returns the words of the compact form of a's states, or 0
// if a's tables are not kept compact: a has no compact form, or its state
// is not whole in a slot.
func compactWords(a algorithm.Algorithm, words int) int {
	cw, ok := a.(interface{ CompactWords() int })
	cf, ok2 := a.(interface{ CountFields() (n, bits int) })
	if !ok || !ok2 || words > maxInline {
		return 0
	}
	c := cw.CompactWords()
	if n, bits := cf.CountFields(); c == 0 || words != 1+(n*bits+63)/64 || c >= words {
		return 0
	}
	return c
}

// countField returns count p of st, a state with count fields of bits
// bits after its word 0 (see algorithm's CountFields).
func countField(st []int64, p, bits int) uint64 {
	per := 64 / bits
	return uint64(st[1+p/per]) >> (bits * (p % per)) & (1<<bits - 1)
}

// packCompact packs st into dst, a compact slot's words, and reports
// whether st fit; dst is unchanged if not. In a table that holds st's key
// alone it first moves the epoch to st's newest slice, less 2^20.
func (t *table) packCompact(dst, st []int64) bool {
	epoch := t.epoch
	if t.n <= 1 {
		epoch = max(0, st[0]-1<<20)
	}
	off := st[0] - epoch
	if off < 0 || off > algorithm.CompactMaxOffset {
		return false
	}
	var w [maxInline]int64
	n, bits := t.l.countN, t.l.countBits
	for p := range n {
		c := countField(st, p, bits)
		if c > algorithm.CompactMaxCount {
			return false
		}
		w[p/4] |= int64(c << (14 * (p % 4)))
	}
	for j := range 3 {
		w[j] |= int64(uint64(off) >> (8 * j) & 0xff << 56)
	}
	// A field past the n counts (a state no slidingWindow wrote) would be
	// lost: check that the words come back as they were.
	var back [maxInline]int64
	unpackCompact(back[:len(st)], w[:len(dst)], epoch, n, bits)
	if back != padded(st) {
		return false
	}
	copy(dst, w[:len(dst)])
	t.epoch = epoch
	return true
}

// padded returns st (at most maxInline words) padded with zeros.
func padded(st []int64) (p [maxInline]int64) {
	copy(p[:], st)
	return p
}

// unpackCompact unpacks src, a compact slot's words, into dst, which has
// Words() words and is all zero.
func (t *table) unpackCompact(dst, src []int64) {
	unpackCompact(dst, src, t.epoch, t.l.countN, t.l.countBits)
}

// unpackCompact unpacks src, the compact words of a state with n count
// fields of bits bits relative to epoch, into dst, which is all zero.
func unpackCompact(dst, src []int64, epoch int64, n, bits int) {
	dst[0] = epoch + int64(uint64(src[0])>>56|uint64(src[1])>>56<<8|uint64(src[2])>>56<<16)
	per := 64 / bits
	for p := range n {
		c := uint64(src[p/4]) >> (14 * (p % 4)) & algorithm.CompactMaxCount
		dst[1+p/per] |= int64(c << (bits * (p % per)))
	}
}
