package memtable

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
func (t *table) unpackAll() {
	old, oldStride, narrow := t.slots, t.stride, t.narrow
	t.packed, t.narrow, t.inline, t.stride = false, false, t.l.words, 1+t.l.words
	defer t.publish()
	if old == nil {
		return
	}
	t.slots = make([]int64, t.cap*t.stride)
	for i := range t.cap {
		t.slots[i*t.stride] = old[i*oldStride]
		dst, src := t.slots[i*t.stride+1:(i+1)*t.stride], old[i*oldStride+1:(i+1)*oldStride]
		if narrow {
			unpackNarrow(dst, src)
		} else {
			unpackState(dst, src)
		}
	}
}

// pack packs st into dst, a packed slot's state words, in the table's
// packed form, and reports whether st fit; dst is unchanged if not.
func (t *table) pack(dst, st []int64) bool {
	if t.narrow {
		return packNarrow(dst, st)
	}
	return packState(dst, st)
}

// unpack unpacks src, a packed slot's state words, into dst, which has
// Words() words.
func (t *table) unpack(dst, src []int64) {
	if t.narrow {
		unpackNarrow(dst, src)
	} else {
		unpackState(dst, src)
	}
}

// Narrow tables. A sliding-window state with 32-bit counts (a limit of
// 65,536 or more) is its newest slice's number and the counts two to a
// word: 7 words with 12 slices, a 64-byte slot. Most keys count far fewer
// than 65,536 units in a slice, so such a table starts narrow: the slice
// number whole, the counts four to a word in 16 bits each, at the same
// ring positions (1+ceil(N/4) words: 4 with 12 slices, a 40-byte slot,
// the same as a limit below 65,536 gives). Whether a state fits depends on
// its counts only, never on the clock. The first state with a count above
// 65,535 converts the table for good to the plain layout (unpackAll),
// exactly as a packed table converts. Until then the common decision is
// made on the narrow words in the slot (the algorithm's DecideNarrow,
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
