package memstore

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
// longer, until 2106. The buckets' states are times in nanoseconds and
// sliding-window's counts fill whole words, so their tables convert on
// their first key. A packed table is accounted against Options.MaxBytes at
// its plain size (Stats.Bytes too), so a conversion, which may come late
// in a table's life, never takes the store past its bound.

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
	old, oldStride := t.slots, t.stride
	t.packed, t.inline, t.stride = false, t.l.words, 1+t.l.words
	defer t.publish()
	if old == nil {
		return
	}
	t.slots = make([]int64, t.cap*t.stride)
	for i := range t.cap {
		t.slots[i*t.stride] = old[i*oldStride]
		unpackState(t.slots[i*t.stride+1:(i+1)*t.stride], old[i*oldStride+1:(i+1)*oldStride])
	}
}
