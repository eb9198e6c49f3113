package memtable

// States are stored up to their last nonzero word and handed back padded
// with zeros to the algorithm's Words(). A table whose states have at most
// maxInline words keeps them whole in the slot. Otherwise the slot holds
// bigInline words: the state's first three when they are all it has;
// else an out-of-line reference and the state's first two, with the rest
// (up to the last nonzero word) in a buffer of its own, sized to its
// length rounded up to bigGrain words. States longer than hugeState words
// keep a buffer of the full length, decided on in place, so that no
// decision copies or scans them.
const (
	bigGrain  = 2
	bigHead   = bigInline - 1 // state words kept in an out-of-line slot
	hugeState = 1024
)

// bigBytes is what an out-of-line buffer of c words costs: the words and
// the slice header in table.big.
func bigBytes(c int) int64 { return int64(c)*8 + 24 }

// inPlace returns the state of slot sl as the memory it lives in, when a
// decision may work on it directly, or nil when the state must be loaded
// into a full-length copy and put back.
func (t *table) inPlace(sl int) []int64 {
	b := sl * t.stride
	if t.inline == t.l.words {
		return t.slots[b+1 : b+1+t.inline : b+1+t.inline]
	}
	if t.slots[b]&outOfLine != 0 && t.l.words > hugeState {
		return t.big[t.slots[b+1]]
	}
	return nil
}

// load copies the state of slot sl into dst, which has Words() words and
// is all zero, and returns dst.
func (t *table) load(sl int, dst []int64) []int64 {
	b := sl * t.stride
	switch {
	case t.packed:
		t.unpack(dst, t.slots[b+1:b+t.stride])
	case t.slots[b]&outOfLine == 0:
		copy(dst, t.slots[b+1:b+t.stride])
	case t.l.words > hugeState:
		copy(dst, t.big[t.slots[b+1]])
	default:
		copy(dst, t.slots[b+2:b+2+bigHead])
		copy(dst[bigHead:], t.big[t.slots[b+1]])
	}
	return dst
}

// stateLen returns the length of st up to its last nonzero word.
func stateLen(st []int64) int {
	n := len(st)
	for n >= 8 && st[n-1]|st[n-2]|st[n-3]|st[n-4]|st[n-5]|st[n-6]|st[n-7]|st[n-8] == 0 {
		n -= 8
	}
	for n > 0 && st[n-1] == 0 {
		n--
	}
	return n
}

// put stores st, which has Words() words, as the state of slot sl, and
// returns the length of st up to its last nonzero word (so a caller may
// clear only that much). When an out-of-line buffer grows the shard past
// its bytes, keys other than sl's are evicted (so sl itself may move; put
// is the last use of sl).
func (t *table) put(sl int, st []int64) int {
	b := sl * t.stride
	if t.packed {
		if t.pack(t.slots[b+1:b+t.stride], st) {
			return len(st)
		}
		t.unpackAll() // the slots keep their places: sl stays valid
		b = sl * t.stride
	}
	if t.inline == t.l.words {
		copy(t.slots[b+1:b+t.stride], st)
		return len(st)
	}
	head := t.slots[b]
	huge := t.l.words > hugeState
	n := len(st)
	if !huge {
		if t.l.used != nil {
			// The algorithm bounds its nonzero words (a bounded-log
			// state's entries): scan only those, not all Words(). An
			// algorithm with an equal Config shares the state's format.
			if u := t.l.used.UsedWords(st); u >= 0 && u < n {
				n = u
			}
		}
		n = stateLen(st[:n])
	}
	if n <= t.inline && !huge {
		if head&outOfLine != 0 {
			t.freeBig(sl)
		}
		copy(t.slots[b+1:b+t.stride], st)
		return n
	}
	rest, tail := st[:n], n // the words that go in the buffer
	if !huge {
		rest, tail = st[bigHead:n], n-bigHead
	}
	if head&outOfLine != 0 {
		buf := t.big[t.slots[b+1]]
		if cap(buf) >= tail && (huge || cap(buf) <= roundGrain(tail)+bigGrain) {
			old := len(buf)
			buf = buf[:max(tail, old)]
			copy(buf, rest)
			clear(buf[tail:])
			t.big[t.slots[b+1]] = buf[:tail]
			if !huge {
				copy(t.slots[b+2:b+2+bigHead], st)
			}
			return n
		}
		t.freeBig(sl)
	}
	size := tail
	if !huge {
		size = roundGrain(tail)
	}
	buf := make([]int64, tail, size)
	copy(buf, rest)
	t.slots[b] = head | outOfLine
	t.slots[b+1] = t.newRef(buf)
	if !huge {
		copy(t.slots[b+2:b+2+bigHead], st)
	}
	t.sh.enforceBytes(uint64(head) &^ metaMask)
	return n
}

func roundGrain(n int) int { return (n + bigGrain - 1) / bigGrain * bigGrain }

// newRef enters buf in t.big and returns its index.
func (t *table) newRef(buf []int64) int64 {
	t.sh.bytes += bigBytes(cap(buf))
	t.bigLive++
	if k := len(t.freeRefs); k > 0 {
		ref := t.freeRefs[k-1]
		t.freeRefs = t.freeRefs[:k-1]
		t.big[ref] = buf
		return ref
	}
	t.big = append(t.big, buf)
	return int64(len(t.big) - 1)
}

// freeBig releases slot sl's out-of-line state, if it has one, and marks
// the slot inline with a zero state.
func (t *table) freeBig(sl int) {
	b := sl * t.stride
	if t.slots[b]&outOfLine == 0 {
		return
	}
	ref := t.slots[b+1]
	t.sh.bytes -= bigBytes(cap(t.big[ref]))
	t.big[ref] = nil
	t.freeRefs = append(t.freeRefs, ref)
	t.bigLive--
	t.slots[b] &^= outOfLine
	clear(t.slots[b+1 : b+t.stride])
}
