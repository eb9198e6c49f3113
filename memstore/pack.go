package memstore

// Packed tables. A table whose algorithm keeps two state words (fixed-window,
// token-bucket, gcra, leaky-bucket, concurrency) starts packed: each slot is
// two words, the head and one word holding both state words as 32-bit
// halves, first word high. A 16-byte slot instead of 24 makes the table a
// third smaller, and a slot never spans two cache lines. The store learns
// nothing about what the words mean: the first state that does not fit
// (a word below zero or at least 2^32, such as a time in nanoseconds)
// converts the table, in place and for good, to the plain layout of one
// word per state word. Fixed-window states (a window number and a count of
// at most algorithm.MaxLimit) fit while there have been fewer than 2^32
// windows since 1970: with windows of a second or longer, until 2106. The
// buckets' states are times in nanoseconds, so their tables convert on
// their first key.

const half = 1 << 32

// pack returns a and b packed into one word, and whether they fit.
func pack(a, b int64) (int64, bool) {
	if uint64(a) >= half || uint64(b) >= half {
		return 0, false
	}
	return a<<32 | b, true
}

// unpack returns the two state words packed in w.
func unpack(w int64) (int64, int64) { return int64(uint64(w) >> 32), w & (half - 1) }

// unpackAll converts a packed table to the plain layout. Every slot keeps
// its index (the probe positions depend only on the table's size), so a
// slot number held by a caller stays valid.
func (t *table) unpackAll() {
	old := t.slots
	t.packed, t.inline, t.stride = false, 2, 3
	if old == nil {
		return
	}
	t.slots = make([]int64, t.cap*t.stride)
	t.sh.bytes += int64(t.cap) * 8
	for i := range t.cap {
		t.slots[i*3] = old[i*2]
		t.slots[i*3+1], t.slots[i*3+2] = unpack(old[i*2+1])
	}
}
