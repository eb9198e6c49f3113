package algorithm

import "time"

// slidingWindow counts units in N slices of Window/N each and counts the
// current slice and the N-1 before it, as the classic sliding window counter
// does. The counted span is therefore between (N-1)/N of Window and Window.
//
// State: [0] the number of the newest slice (time/slice), then the N slice
// counts packed into fields of the remaining words, slice number z at ring
// position z%N, position p in bits [b*(p%f), b*(p%f+1)) of word 1+p/f. The
// field width b is 16 bits when Limit fits in them and 32 bits otherwise;
// f = 64/b fields share a word. Decide never lets a slice exceed Limit, and
// Record saturates a count at the field's maximum, so no count spills into
// its neighbour.
type slidingWindow struct {
	base
	limit     int64
	slice     int64 // nanoseconds per slice
	slices    int64
	lastSlice int64  // maxTime / slice: the last slice number a state can hold
	bits      int64  // width of a count field: 16 or 32
	perLog    int64  // log2 of the count fields per word (64/bits): 2 or 1
	field     uint64 // largest count a field holds: 1<<bits - 1
	// narrow, for 32-bit counts, is a twin with 16-bit fields (four to a
	// word, the same ring positions) that DecideNarrow decides with; nil
	// for 16-bit counts.
	narrow *slidingWindow
}

// slidingWindowBits returns the width of a slice count field for a limit: 16
// bits when the limit fits in them, else 32 (MaxLimit fits).
func slidingWindowBits(limit int64) int64 {
	if limit < 1<<16 {
		return 16
	}
	return 32
}

func newSlidingWindow(c Config) *slidingWindow {
	bits, perLog := slidingWindowBits(c.Limit), int64(1)
	if bits == 16 {
		perLog = 2
	}
	per := int64(1) << perLog
	a := &slidingWindow{
		base:      base{cfg: c, words: 1 + int((int64(c.Slices)+per-1)/per), idle: c.Window},
		limit:     c.Limit,
		slice:     int64(c.Window) / int64(c.Slices),
		slices:    int64(c.Slices),
		lastSlice: maxTime / (int64(c.Window) / int64(c.Slices)),
		bits:      bits,
		perLog:    perLog,
		field:     1<<bits - 1,
	}
	a.withParams(Params{Slices: c.Slices})
	if bits == 32 {
		n := *a
		n.words, n.bits, n.perLog, n.field = 1+int((a.slices+3)/4), 16, 2, 1<<16-1
		a.narrow = &n
	}
	return a
}

// HalfWords reports false: the state's counts are bit fields that fill
// whole words (a 32-bit count at an odd ring position is a word's high
// half), so a store that keeps state words in 32-bit halves while they fit
// would change a key's layout whenever its newest slice moved to such a
// position, that is, depending on the time of day. A store that asks keeps
// these states in whole words from the start.
func (a *slidingWindow) HalfWords() bool { return false }

// CountFields reports how the state keeps its counts, for a store that
// holds them narrower while they fit: n counts of bits bits each, ring
// position p in bits [bits*(p%f), bits*(p%f+1)) of word 1+p/f, f = 64/bits,
// after the newest slice's number in word 0. The fields depend on the
// limit only, never on the clock.
func (a *slidingWindow) CountFields() (n, bits int) { return int(a.slices), int(a.bits) }

// count returns the count of slice number z.
func (a *slidingWindow) count(s []int64, z int64) int64 {
	return a.countAt(s, z%a.slices)
}

// countAt returns the count at ring position p.
func (a *slidingWindow) countAt(s []int64, p int64) int64 {
	mask := int64(1)<<a.perLog - 1
	return int64(uint64(s[1+p>>a.perLog]) >> (a.bits * (p & mask)) & a.field)
}

// set sets the count of slice number z to v, saturated at the field's
// maximum.
func (a *slidingWindow) set(s []int64, z, v int64) {
	a.setAt(s, z%a.slices, v)
}

// setAt sets the count at ring position p to v, saturated at the field's
// maximum.
func (a *slidingWindow) setAt(s []int64, p, v int64) {
	i, sh := 1+p>>a.perLog, a.bits*(p&(int64(1)<<a.perLog-1))
	v = min(v, int64(a.field))
	s[i] = int64(uint64(s[i])&^(a.field<<sh) | uint64(v)<<sh)
}

// view returns the slice now falls in (never before the newest one in s),
// now moved forward to it if the clock went back, the oldest slice counted,
// and the total counted.
func (a *slidingWindow) view(s []int64, now int64) (k, t, oldest, total int64) {
	now = clampTime(now)
	k = now / a.slice
	if k < s[0] {
		k, now = s[0], s[0]*a.slice
	}
	oldest = max(k-a.slices+1, 0)
	if k-s[0] >= a.slices {
		return k, now, oldest, 0
	}
	// Sum every slot, then take out the slices the gap since s[0] expired.
	total = a.sum(s)
	if z := max(s[0]-a.slices+1, 0); z < oldest {
		for p := z % a.slices; z < oldest; z++ {
			total -= a.countAt(s, p)
			if p++; p == a.slices {
				p = 0
			}
		}
	}
	return k, now, oldest, total
}

// sum returns the sum of every slice count in s, without a loop per
// field: the fields of a word are added in pairs, side by side.
func (a *slidingWindow) sum(s []int64) int64 {
	var acc uint64
	if a.bits == 16 {
		// Two 32-bit lanes, each the sum of two fields per word: at most
		// maxSlices/4 * 2 * (2^16-1) < 2^32, so no lane carries into the other.
		const lanes = 0x0000ffff0000ffff
		for _, w := range s[1:] {
			u := uint64(w)
			acc += u&lanes + u>>16&lanes
		}
		return int64(acc&(1<<32-1) + acc>>32)
	}
	for _, w := range s[1:] {
		u := uint64(w)
		acc += u&(1<<32-1) + u>>32
	}
	return int64(acc)
}

// repair zeroes a state no slidingWindow could have written.
func (a *slidingWindow) repair(s []int64) {
	if s[0] < 0 || s[0] > a.lastSlice {
		clear(s)
	}
}

func (a *slidingWindow) decide(s []int64, now, cost int64, commit bool) Decision {
	s = s[:a.words:a.words]
	a.repair(s)
	k, now, oldest, total := a.view(s, now)
	d := Decision{Limit: a.limit}
	if r := badCost(cost, a.limit); r != "" {
		d.Remaining, d.Reason = nonNeg(a.limit-total), r
		d.ResetAfter = a.resetAfter(s, now, oldest, s[0], s[0]%a.slices)
		return d
	}
	if total+cost > a.limit {
		return a.overLimit(s, now, oldest, total, cost, s[0]%a.slices)
	}
	if commit {
		a.advance(s, k)
		a.set(s, k, a.count(s, k)+cost)
	}
	d.Allowed, d.Remaining = true, a.limit-total-cost
	d.ResetAfter = time.Duration((k+a.slices)*a.slice - now)
	return d
}

// overLimit is the decision on a request of cost that total, the units
// counted at now in slices oldest..s[0] (fewer than N), leaves no room for.
// newest is the ring position of slice s[0].
func (a *slidingWindow) overLimit(s []int64, now, oldest, total, cost, newest int64) Decision {
	// Slice z stops counting when slice z+N begins.
	need, z, p := total+cost-a.limit, oldest, newest-(s[0]-oldest)
	if p < 0 {
		p += a.slices
	}
	for ; z < s[0]; z++ {
		need -= a.countAt(s, p)
		if need <= 0 {
			break
		}
		if p++; p == a.slices {
			p = 0
		}
	}
	return Decision{
		Limit:      a.limit,
		Remaining:  nonNeg(a.limit - total),
		Reason:     ReasonOverLimit,
		RetryAfter: time.Duration((z+a.slices)*a.slice - now),
		ResetAfter: a.resetAfter(s, now, oldest, s[0], newest),
	}
}

// resetAfter returns how long until the newest non-empty slice among
// oldest..newest stops counting; p is the ring position of newest.
func (a *slidingWindow) resetAfter(s []int64, now, oldest, newest, p int64) time.Duration {
	for z := newest; z >= oldest; z-- {
		if a.countAt(s, p) > 0 {
			return time.Duration((z+a.slices)*a.slice - now)
		}
		if p--; p < 0 {
			p = a.slices - 1
		}
	}
	return 0
}

// advance makes slice k the newest, emptying the slices it passes.
func (a *slidingWindow) advance(s []int64, k int64) {
	if k <= s[0] {
		return
	}
	z := max(s[0]+1, k-a.slices+1)
	for p := z % a.slices; z <= k; z++ {
		a.setAt(s, p, 0)
		if p++; p == a.slices {
			p = 0
		}
	}
	s[0] = k
}

// Decide decides and, if allowed, records the request. The common cases,
// a request in the state's newest slice or the one after it, are decided
// here with comparisons in place of the division that finds the slice, the
// counts summed two fields at a time, one division for the ring position
// and, if allowed, one field's update; the rest goes through decide.
func (a *slidingWindow) Decide(s []int64, now, cost int64) Decision {
	s = s[:a.words:a.words]
	k0, t := s[0], clampTime(now)
	if k0 < 0 || k0 > a.lastSlice || cost < 1 || cost > a.limit {
		return a.decide(s, now, cost, true)
	}
	d := t - k0*a.slice
	if d < 0 || d >= 2*a.slice || d >= a.slice && a.slices == 1 {
		return a.decide(s, now, cost, true)
	}
	total := a.sum(s)
	p0 := int64(uint64(k0) % uint64(a.slices)) // the position of slice k0
	k, p := k0, p0                             // and of slice k
	if d >= a.slice {
		// Slice k0+1 begins: it takes the position of slice k0-N+1,
		// which stops counting (a slice before 0 never counted).
		if k, p = k+1, p+1; p == a.slices {
			p = 0
		}
		if k0 >= a.slices-1 {
			total -= a.countAt(s, p)
		}
	}
	if total+cost > a.limit {
		return a.overLimit(s, t, max(k-a.slices+1, 0), total, cost, p0)
	}
	// The count stays within the limit, which fits a field: no
	// saturation, no carry into the next field.
	i, sh := 1+p>>a.perLog, uint64(a.bits*(p&(int64(1)<<a.perLog-1)))
	if k > k0 {
		s[0], s[i] = k, int64(uint64(s[i])&^(a.field<<sh))
	}
	s[i] += cost << sh
	return Decision{
		Allowed:    true,
		Limit:      a.limit,
		Remaining:  a.limit - total - cost,
		ResetAfter: time.Duration((k+a.slices)*a.slice - t),
	}
}

// Peek is Decide without changing the state.
func (a *slidingWindow) Peek(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, false)
}

// Record adds cost to the slice now falls in, if that slice still counts.
func (a *slidingWindow) Record(s []int64, now, cost int64) {
	s = s[:a.words:a.words]
	if cost < 1 {
		return
	}
	a.repair(s)
	z := clampTime(now) / a.slice
	if z <= s[0]-a.slices {
		return
	}
	a.advance(s, z)
	a.set(s, z, a.count(s, z)+min(cost, MaxLimit))
}

// DecideNarrow decides on the narrow form of a state with 32-bit counts,
// as a store keeps it while every count fits 16 bits: word 0 the newest
// slice's number, then the counts in 16-bit fields, four to a word, at
// their ring positions (see CountFields). It decides the common cases of
// Decide; it reports false, having changed nothing, for the others and
// for a request that would take a count past 65,535, which the caller
// decides on the state's own words. The counted span, the sums and the
// decisions are Decide's: only the fields are narrower.
func (a *slidingWindow) DecideNarrow(s []int64, now, cost int64) (Decision, bool) {
	n := a.narrow
	if n == nil {
		return Decision{}, false
	}
	s = s[:n.words:n.words]
	k0, t := s[0], clampTime(now)
	if k0 < 0 || k0 > n.lastSlice || cost < 1 || cost > n.limit {
		return Decision{}, false
	}
	d := t - k0*n.slice
	if d < 0 || d >= 2*n.slice || d >= n.slice && n.slices == 1 {
		return Decision{}, false
	}
	total := n.sum(s) // maxSlices 16-bit counts: no lane carries
	p0 := int64(uint64(k0) % uint64(n.slices))
	k, p := k0, p0
	if d >= n.slice {
		if k, p = k+1, p+1; p == n.slices {
			p = 0
		}
		if k0 >= n.slices-1 {
			total -= n.countAt(s, p)
		}
	}
	if total+cost > n.limit {
		return n.overLimit(s, t, max(k-n.slices+1, 0), total, cost, p0), true
	}
	i, sh := 1+p>>2, uint64(16*(p&3))
	w := uint64(s[i])
	if k > k0 {
		w &^= n.field << sh
	}
	if w>>sh&n.field+uint64(cost) > n.field {
		return Decision{}, false // the count would not fit 16 bits
	}
	s[0], s[i] = k, int64(w+uint64(cost)<<sh)
	return Decision{
		Allowed:    true,
		Limit:      n.limit,
		Remaining:  n.limit - total - cost,
		ResetAfter: time.Duration((k+n.slices)*n.slice - t),
	}, true
}
