package memstore

// States are stored up to their last nonzero word and handed back padded
// with zeros to the algorithm's Words(). A table whose states have at most
// maxInline words keeps them whole in the slot; otherwise the slot holds
// the first bigInline words, and a state that needs more moves out of line
// into a buffer of its own, sized to its length rounded up to bigGrain
// words. States longer than hugeState words keep a buffer of the full
// length, decided on in place, so that no decision copies or scans them.
const (
	bigGrain  = 8
	hugeState = 1024
)

// bigBytes is what an out-of-line buffer of c words costs: the words, the
// slice header in table.big and the owner's hash.
func bigBytes(c int) int64 { return int64(c)*8 + 32 }

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
	if t.slots[b]&outOfLine != 0 {
		copy(dst, t.big[t.slots[b+1]])
	} else {
		copy(dst, t.slots[b+1:b+t.stride])
	}
	return dst
}

// put stores st, which has Words() words, as the state of slot sl. When an
// out-of-line buffer grows the shard past its bytes, keys other than sl's
// are evicted (so sl itself may move; put is the last use of sl).
func (t *table) put(sl int, st []int64) {
	b := sl * t.stride
	if t.inline == t.l.words {
		copy(t.slots[b+1:b+t.stride], st)
		return
	}
	head := t.slots[b]
	n := len(st)
	if t.l.words <= hugeState {
		for n > 0 && st[n-1] == 0 {
			n--
		}
	}
	if n <= t.inline {
		if head&outOfLine != 0 {
			t.freeBig(sl)
		}
		copy(t.slots[b+1:b+t.stride], st)
		return
	}
	if head&outOfLine != 0 {
		ref := t.slots[b+1]
		buf := t.big[ref]
		if cap(buf) >= n && cap(buf) <= roundGrain(n)+bigGrain {
			old := len(buf)
			buf = buf[:max(n, old)]
			copy(buf, st[:n])
			clear(buf[n:])
			t.big[ref] = buf[:n]
			return
		}
		t.freeBig(sl)
	}
	size := n
	if t.l.words <= hugeState {
		size = roundGrain(n)
	}
	buf := make([]int64, n, size)
	copy(buf, st[:n])
	ref := t.newRef(buf, uint64(head)&^metaMask)
	t.slots[b] = head | outOfLine
	t.slots[b+1] = ref
	clear(t.slots[b+2 : b+t.stride])
	t.sh.enforceBytes(uint64(head) &^ metaMask)
}

func roundGrain(n int) int { return (n + bigGrain - 1) / bigGrain * bigGrain }

// newRef enters buf, owned by the key of hash h, in t.big and returns its
// index.
func (t *table) newRef(buf []int64, h uint64) int64 {
	t.sh.bytes += bigBytes(cap(buf))
	t.bigLive++
	if k := len(t.freeRefs); k > 0 {
		ref := t.freeRefs[k-1]
		t.freeRefs = t.freeRefs[:k-1]
		t.big[ref], t.bigOwner[ref] = buf, h
		return ref
	}
	t.big = append(t.big, buf)
	t.bigOwner = append(t.bigOwner, h)
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
	t.big[ref], t.bigOwner[ref] = nil, 0
	t.freeRefs = append(t.freeRefs, ref)
	t.bigLive--
	t.slots[b] &^= outOfLine
	clear(t.slots[b+1 : b+t.stride])
}
