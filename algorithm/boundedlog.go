package algorithm

import (
	"math"
	"time"
)

// boundedLog is a log of accepted units compressed into entries of at most
// m = max(1, floor(e*L)) units, each entry covering the span from its first
// to its last timestamp.
//
// At time t it drops entries whose last timestamp is at or before t-W and
// counts S, the units of the entries whose first timestamp is after t-W. A
// request of cost c is accepted iff S+c <= L. Its units fill the open
// (newest) entry up to m and then start new entries of up to m units each;
// an open entry whose first timestamp is already at or before t-W is closed
// instead of filled, so units accepted at t are always counted in S.
//
// Promise 1 (bounded overshoot). Entries do not overlap in time, so of the
// entries kept at t at most one, the oldest, straddles t-W; every unit in
// (t-W, t] lies in a kept entry. The entries after the straddler hold S <= L
// units once a request is accepted, and the straddler at most m, so any
// W-long interval ending at an accepted request holds at most L+m <=
// (1+e)*L accepted units. m is floor(e*L) computed exactly (no rounding up),
// and timestamps are kept to the nanosecond, so nothing rounds against this
// bound.
//
// Promise 2 (no false rejects). Every unit S counts has a timestamp after
// t-W, so S is at most the units the key really had accepted in (t-W, t]. A
// request that keeps that true count within L keeps S+c within L.
//
// Size. An entry is closed before it is full only when it straddles t-W, and
// then it is the oldest entry; so after an accepted request at t the kept
// entries are at most one straddler, k full entries of m units after it and
// the open entry with at least 1 unit, all but the straddler counted in S <= L:
// k*m + 1 <= L, k <= floor((L-1)/m). So Decide alone keeps at most
// floor((L-1)/m) + 2 entries; a test checks it on random traffic. Record,
// which merges counts taken elsewhere, also closes entries that span
// ceil(W*m/L) when entries before them are kept (see logRing.record), so the
// capacity is 2*ceil(L/m) + 2 entries. Only when it is full does Record put
// more than m units in an entry, rather than lose units.
//
// Compact encoding. Decide needs only each entry's first timestamp, the
// open entry's count and the newest timestamp: every closed entry Decide
// makes holds exactly m units (a straddler it closes early is never counted
// again, so it is recorded as full), and a closed entry's last timestamp is
// taken to be the next entry's first (an upper bound, which only keeps an
// entry a little longer and changes no decision: an entry is counted by its
// first timestamp). The state, of 2 + 3*capacity words, is
//
//	[0] header: 2^52 + count of the open entry * 2^18 + merged * 2^17 + n
//	    (n entries; 0 when there are none)
//	[1] the newest timestamp: the open entry's last
//	[2 .. 2+capacity)              first timestamp of entry i, oldest first
//	[2+capacity .. 2+2*capacity)   m - count of closed entry i (0: full)
//	[2+2*capacity .. 2+3*capacity) next entry's first - last of closed entry i
//
// Decide writes only the first two regions, so a key that never merged has
// zeros after word 2+n: a key with at most m units in its window is three
// nonzero words, and a key at its limit (L = 600, e = 0.05: at most 21
// entries) at most 23. Only Record, for late events, writes the last two
// regions, and sets the merged bit when it does. Every word stays below 2^53
// when times are in microseconds, so the Redis script holds the same layout
// in doubles.
type boundedLog struct {
	base
	limit, window int64
	m             int64 // units per entry
	size          int64 // capacity in entries
	ring          logRing
}

// Header fields of the compact state.
const (
	blMark      = int64(1) << 52 // set in every nonempty header
	blMerged    = int64(1) << 17 // the deficit and gap regions may be nonzero
	blCountUnit = int64(1) << 18 // the open entry's count is header / 2^18 mod 2^32
	blNMask     = blMerged - 1
	blMaxCount  = int64(MaxLimit) // counts past m (a full ring) saturate here
)

// boundedLogSize returns the units per entry and the capacity in entries
// for limit l and tolerance e: room for Decide's ceil(l/m)+2 entries and as
// many again for the time-capped entries Record makes of late events. m is
// floor(e*l) exactly, never rounded up, and at least 1.
func boundedLogSize(l int64, e float64) (m, size int64) {
	x := float64(l)
	m = int64(e * x)
	if m > 0 && math.FMA(e, x, -float64(m)) < 0 {
		m-- // e*l rounded up to the integer m
	}
	m = max(1, m)
	return m, 2*((l+m-1)/m) + 2
}

func newBoundedLog(c Config) *boundedLog {
	m, size := boundedLogSize(c.Limit, c.Tolerance)
	a := &boundedLog{
		base:   base{cfg: c, words: 2 + 3*int(size), idle: c.Window},
		limit:  c.Limit,
		window: int64(c.Window),
		m:      m,
		size:   size,
		ring:   logRing{window: int64(c.Window), m: m, size: size, span: mulDivUp(int64(c.Window), m, c.Limit)},
	}
	a.withParams(Params{EntryUnits: m, Entries: size})
	return a
}

// header returns the entries and the open entry's count of s, zeroing a
// state no boundedLog could have written.
func (a *boundedLog) header(s []int64) (n, count int64, merged bool) {
	h := s[0]
	if h == 0 {
		return 0, 0, false
	}
	n, count = h&blNMask, (h-blMark)/blCountUnit
	if h < blMark || h >= 2*blMark || n < 1 || n > a.size {
		clear(s)
		return 0, 0, false
	}
	return n, count, h&blMerged != 0
}

// setHeader writes the header for n entries.
func setHeader(s []int64, n, count int64, merged bool) {
	if n == 0 {
		s[0], s[1] = 0, 0
		return
	}
	h := blMark + min(count, blMaxCount)*blCountUnit + n
	if merged {
		h += blMerged
	}
	s[0] = h
}

// last returns the last timestamp of entry i of n.
func (a *boundedLog) last(s []int64, i, n int64, merged bool) int64 {
	if i == n-1 {
		return s[1]
	}
	if merged {
		return s[2+i+1] - s[2+2*a.size+i]
	}
	return s[2+i+1]
}

// count returns the units of entry i of n whose open count is open.
func (a *boundedLog) count(s []int64, i, n, open int64, merged bool) int64 {
	if i == n-1 {
		return open
	}
	if merged {
		return a.m - s[2+a.size+i]
	}
	return a.m
}

// logView is what a decision at time t sees: the entries to drop (last
// timestamp at or before t-W), the first entry counted and the sum S.
type logView struct {
	n, open          int64
	merged           bool
	t                int64
	drop, start, sum int64
}

// view moves now forward to the newest timestamp (so a clock that went back
// gets no allowance) and fills v with the view of s at it.
func (a *boundedLog) view(s []int64, now int64, v *logView) {
	n, open, merged := a.header(s)
	*v = logView{n: n, open: open, merged: merged, t: clampTime(now)}
	if n == 0 {
		return
	}
	t := max(v.t, s[1])
	v.t = t
	cut := t - a.window
	drop := int64(0)
	if !merged {
		// Entry i ends at entry i+1's first timestamp, the newest at s[1].
		for drop < n-1 && s[2+drop+1] <= cut {
			drop++
		}
		if drop == n-1 && s[1] <= cut {
			drop = n
		}
	} else {
		for drop < n && a.last(s, drop, n, true) <= cut {
			drop++
		}
	}
	start := drop
	if start < n && s[2+start] <= cut {
		start++
	}
	v.drop, v.start = drop, start
	if start < n {
		v.sum = (n-1-start)*a.m + open
		if merged {
			for i := start; i < n-1; i++ {
				v.sum -= s[2+a.size+i]
			}
		}
	}
}

func (a *boundedLog) decide(s []int64, now, cost int64, commit bool) Decision {
	s = s[:a.words:a.words]
	var v logView
	a.view(s, now, &v)
	now = v.t
	d := Decision{Limit: a.limit}
	if v.start < v.n {
		// S falls to 0 when the newest entry's first timestamp leaves the window.
		d.ResetAfter = time.Duration(s[2+v.n-1] + a.window - now)
	}
	if r := badCost(cost, a.limit); r != "" {
		d.Remaining, d.Reason = nonNeg(a.limit-v.sum), r
		return d
	}
	if v.sum+cost > a.limit {
		d.Remaining, d.Reason = nonNeg(a.limit-v.sum), ReasonOverLimit
		d.RetryAfter = time.Duration(s[2+a.retryEntry(s, &v, cost)] + a.window - now)
		return d
	}
	// The units may join the open entry, which started before now.
	first := now
	if v.drop < v.n && s[2+v.n-1] > now-a.window && v.open+cost <= a.m {
		first = s[2+v.n-1]
	}
	d.ResetAfter = time.Duration(first + a.window - now)
	if commit {
		a.append(s, &v, cost)
	}
	d.Allowed, d.Remaining = true, a.limit-v.sum-cost
	return d
}

// retryEntry returns the entry whose leaving S lets a request of cost in:
// entries leave S oldest first, each at its first timestamp + W.
func (a *boundedLog) retryEntry(s []int64, v *logView, cost int64) int64 {
	need, i := v.sum+cost-a.limit, v.start
	if !v.merged {
		// Every counted entry but the open one holds m units.
		return min(v.start+(need+a.m-1)/a.m-1, v.n-1)
	}
	for ; i < v.n-1; i++ {
		need -= a.count(s, i, v.n, v.open, true)
		if need <= 0 {
			break
		}
	}
	return i
}

// append drops the entries v drops and adds cost units at v.t, which is not
// before the newest timestamp.
func (a *boundedLog) append(s []int64, v *logView, cost int64) {
	n, open, merged := v.n, v.open, v.merged
	if v.drop > 0 {
		n = a.shift(s, n, v.drop, merged)
		if n == 0 {
			open, merged = 0, false
		}
	}
	now := v.t
	if n > 0 && s[2+n-1] > now-a.window && open < a.m {
		k := min(cost, a.m-open)
		open += k
		cost -= k
	}
	// Closing the open entry leaves its deficit and gap at 0: it is full,
	// or a straddler that is never counted again, and its last timestamp is
	// taken to be now, the next entry's first.
	for cost > 0 && n < a.size {
		k := min(cost, a.m)
		s[2+n] = now
		n++
		open = k
		cost -= k
	}
	open += cost // Decide never gets here: it accepts at most L units
	setHeader(s, n, open, merged)
	s[1] = now
}

// shift drops the oldest drop entries of n and returns how many are left.
func (a *boundedLog) shift(s []int64, n, drop int64, merged bool) int64 {
	left := n - drop
	copy(s[2:2+left], s[2+drop:2+n])
	clear(s[2+left : 2+n])
	if merged {
		for _, r := range []int64{2 + a.size, 2 + 2*a.size} {
			copy(s[r:r+left], s[r+drop:r+n])
			clear(s[r+left : r+n])
		}
	}
	return left
}

// Decide decides and, if allowed, records the request. The common cases
// (see decideFast) are decided with no loop; the rest goes through decide.
func (a *boundedLog) Decide(s []int64, now, cost int64) (d Decision) {
	s = s[:a.words:a.words]
	if !a.decideFast(&d, s, now, cost) {
		d = a.decide(s, now, cost, true)
	}
	return d
}

// decideFast decides the common cases, a key that took no late events and
// needs no entry dropped, and that either is over its limit or has room in
// its open entry for the request, on the header, the newest timestamp and
// two or three first timestamps, and writes every field of *d. It reports
// false, having changed nothing, for every other case. s may be the
// state's first words only (the rest zero): a state of n entries needs
// 2 + n of them, and decideFast writes only s[0] and s[1].
func (a *boundedLog) decideFast(d *Decision, s []int64, now, cost int64) bool {
	if len(s) < 3 {
		return false
	}
	h := s[0]
	n := h & blNMask
	if h < blMark || h >= 2*blMark || h&blMerged != 0 || n < 1 || n > a.size || n > int64(len(s)-2) || cost < 1 || cost > a.limit {
		return false
	}
	t := max(clampTime(now), s[1])
	cut := t - a.window
	// Entry i ends where entry i+1 starts (the newest at s[1]), so nothing
	// is dropped while the oldest entry ends after t-W; it is counted if it
	// also starts after t-W. (In a state decide wrote the first timestamps
	// never go down, but the checks keep this path decide's on any state.)
	end, start := s[1], int64(0)
	if n > 1 {
		end = s[3]
	}
	if s[2] <= cut {
		start = 1
	}
	if end <= cut || start == n {
		return false
	}
	open := (h - blMark) / blCountUnit
	sum := (n-1-start)*a.m + open // every counted entry but the open one is full
	reset := time.Duration(s[2+n-1] + a.window - t)
	if sum+cost > a.limit {
		// Entries leave S oldest first, each at its first timestamp + W.
		i := min(start+(sum+cost-a.limit+a.m-1)/a.m-1, n-1)
		*d = Decision{Limit: a.limit, Remaining: nonNeg(a.limit - sum), ResetAfter: reset,
			RetryAfter: time.Duration(s[2+i] + a.window - t), Reason: ReasonOverLimit}
		return true
	}
	if open+cost > a.m || s[2+n-1] <= cut {
		return false // the request opens a new entry
	}
	s[0], s[1] = h+cost*blCountUnit, t
	*d = Decision{Allowed: true, Limit: a.limit, Remaining: a.limit - sum - cost, ResetAfter: reset}
	return true
}

// UsedWords returns how many leading words of s may be nonzero: 2 + n for
// a state with n entries that took no late events (Decide writes nothing
// past them), else len(s). A store that keeps a state only up to its last
// nonzero word may keep this many instead of scanning for it.
func (a *boundedLog) UsedWords(s []int64) int {
	h := s[0]
	if h == 0 {
		return 0
	}
	n := h & blNMask
	if h < blMark || h >= 2*blMark || h&blMerged != 0 || n < 1 || n > a.size {
		return len(s)
	}
	return 2 + int(n)
}

// Used returns the units S counts at now: those of the entries that began
// within the window, the straddling one left out as decisions leave it
// (past the limit when a charge overspent it).
func (a *boundedLog) Used(s []int64, now int64) int64 {
	c := make([]int64, a.words)
	copy(c, s)
	var v logView
	a.view(c, now, &v)
	return v.sum
}

// Peek is Decide without changing the state.
func (a *boundedLog) Peek(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, false)
}

// Record adds cost units at now without checking the limit, as merges of
// counts taken elsewhere do. It expands the state into the wide ring form,
// merges there (logRing.record says where late events go) and packs the
// ring back, so the merged bit is set only on keys that took late events.
func (a *boundedLog) Record(s []int64, now, cost int64) {
	s = s[:a.words:a.words]
	if cost < 1 {
		return
	}
	var buf [2 + 3*64]int64
	r := buf[:]
	if a.words > len(buf) {
		r = make([]int64, a.words)
	}
	r = r[:a.words]
	a.expand(s, r)
	a.ring.record(r, now, min(cost, MaxLimit))
	a.pack(r, s)
}

// expand writes the ring form of compact state s into r, oldest entry at
// index 0.
func (a *boundedLog) expand(s, r []int64) {
	clear(r)
	n, open, merged := a.header(s)
	r[0] = n
	for i := range n {
		o := 2 + 3*i
		r[o], r[o+1], r[o+2] = s[2+i], a.last(s, i, n, merged), a.count(s, i, n, open, merged)
	}
}

// pack writes the compact form of ring state r into s. Counts past
// blMaxCount (a full ring only) saturate.
func (a *boundedLog) pack(r, s []int64) {
	clear(s)
	n := r[0]
	if n < 0 || n > a.size || r[1] < 0 || r[1] >= a.size {
		return
	}
	merged := false
	for i := range n {
		o := a.ring.at(r, i)
		s[2+i] = r[o]
		c := min(r[o+2], blMaxCount)
		if i == n-1 {
			s[1] = r[o+1]
			setHeader(s, n, c, false)
			break
		}
		d, g := a.m-c, r[a.ring.at(r, i+1)]-r[o+1]
		s[2+a.size+i], s[2+2*a.size+i] = d, g
		merged = merged || d != 0 || g != 0
	}
	if merged {
		s[0] |= blMerged
	}
}
