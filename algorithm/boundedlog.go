package algorithm

import "time"

// boundedLog is a log of accepted units compressed into entries of at most
// m = max(1, floor(e*L)) units, each entry keeping the first and last
// timestamp of the units it holds.
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
// (1+e)*L accepted units.
//
// Promise 2 (no false rejects). Every unit S counts has a timestamp after
// t-W, so S is at most the units the key really had accepted in (t-W, t]. A
// request that keeps that true count within L keeps S+c within L.
//
// Size. An entry is closed before it is full only when it straddles t-W, and
// then it is the oldest entry; so after an accepted request at t the kept
// entries are at most one straddler, k full entries of m units after it and
// the open entry with at least 1 unit, all but the straddler counted in S <= L:
// k*m + 1 <= L, k <= floor((L-1)/m). So at most floor((L-1)/m) + 2 <=
// ceil(L/m) + 2 entries are ever kept, which is maxEntries; a test checks it
// on random traffic. Only Record, which does not check the limit, can fill
// the ring; then it adds to the open entry beyond m rather than lose units.
//
// State: [0] number of entries, [1] index of the oldest entry in the ring,
// then maxEntries entries of three words: first, last, count.
type boundedLog struct {
	base
	limit, window int64
	m             int64 // units per entry
	size          int64 // entries in the ring
}

// boundedLogSize returns the units per entry and the ring size for limit l
// and tolerance e.
func boundedLogSize(l int64, e float64) (m, size int64) {
	m = max(1, int64(e*float64(l)))
	return m, (l+m-1)/m + 2
}

func newBoundedLog(c Config) *boundedLog {
	m, size := boundedLogSize(c.Limit, c.Tolerance)
	return &boundedLog{
		base:   base{cfg: c, words: 2 + 3*int(size), idle: c.Window},
		limit:  c.Limit,
		window: int64(c.Window),
		m:      m,
		size:   size,
	}
}

// at returns the offset in the state of the i-th oldest entry.
func (a *boundedLog) at(s []int64, i int64) int64 {
	return 2 + 3*((s[1]+i)%a.size)
}

// view moves now forward to the newest timestamp in s (so a clock that went
// back gets no allowance) and returns it with the number of entries to drop,
// the index of the first entry counted in S, and S.
func (a *boundedLog) view(s []int64, now int64) (t, drop, start, sum int64) {
	n := s[0]
	now = clampTime(now)
	if n > 0 {
		now = max(now, s[a.at(s, n-1)+1])
	}
	cut := now - a.window
	// Walk the ring by offset, wrapping, rather than by a modulo per entry.
	o, end := a.at(s, 0), int64(2+3*a.size)
	next := func() {
		if o += 3; o == end {
			o = 2
		}
	}
	for drop < n && s[o+1] <= cut {
		drop++
		next()
	}
	start = drop
	if start < n && s[o] <= cut {
		start++
		next()
	}
	for i := start; i < n; i++ {
		sum += s[o+2]
		next()
	}
	return now, drop, start, sum
}

// repair zeroes a state whose header no boundedLog could have written.
func (a *boundedLog) repair(s []int64) {
	if s[0] < 0 || s[0] > a.size || s[1] < 0 || s[1] >= a.size {
		clear(s)
	}
}

func (a *boundedLog) decide(s []int64, now, cost int64, commit bool) Decision {
	s = s[:a.words:a.words]
	a.repair(s)
	now, drop, start, sum := a.view(s, now)
	n := s[0]
	d := Decision{Limit: a.limit}
	if start < n {
		// S falls to 0 when the newest entry's first timestamp leaves the window.
		d.ResetAfter = time.Duration(s[a.at(s, n-1)] + a.window - now)
	}
	if r := badCost(cost, a.limit); r != "" {
		d.Remaining, d.Reason = nonNeg(a.limit-sum), r
		return d
	}
	if sum+cost > a.limit {
		// Entries leave S oldest first, each at its first timestamp + W.
		need, i := sum+cost-a.limit, start
		for ; i < n-1; i++ {
			need -= s[a.at(s, i)+2]
			if need <= 0 {
				break
			}
		}
		d.Remaining, d.Reason = nonNeg(a.limit-sum), ReasonOverLimit
		d.RetryAfter = time.Duration(s[a.at(s, i)] + a.window - now)
		return d
	}
	// The units may join an open entry that started before now.
	d.ResetAfter = time.Duration(a.openFirst(s, now, cost) + a.window - now)
	if commit {
		s[1] = (s[1] + drop) % a.size
		s[0] -= drop
		a.add(s, now, cost, now-a.window)
	}
	d.Allowed, d.Remaining = true, a.limit-sum-cost
	return d
}

// openFirst returns the first timestamp of the entry a request of cost at
// now would end in, after dropping.
func (a *boundedLog) openFirst(s []int64, now, cost int64) int64 {
	n := s[0]
	if n == 0 {
		return now
	}
	o := a.at(s, n-1)
	if s[o] > now-a.window && s[o+2]+cost <= a.m {
		return s[o]
	}
	return now
}

// add appends cost units at time now (not before the newest entry). An open
// entry whose first timestamp is at or before cut is not filled.
func (a *boundedLog) add(s []int64, now, cost, cut int64) {
	n := s[0]
	if n > 0 {
		o := a.at(s, n-1)
		if s[o] > cut && s[o+2] < a.m {
			k := min(cost, a.m-s[o+2])
			s[o+1], s[o+2] = now, s[o+2]+k
			cost -= k
		}
	}
	for cost > 0 && n < a.size {
		k := min(cost, a.m)
		o := a.at(s, n)
		s[o], s[o+1], s[o+2] = now, now, k
		n++
		cost -= k
	}
	s[0] = n
	if cost > 0 { // only Record gets here: the ring is full
		o := a.at(s, n-1)
		s[o+1], s[o+2] = now, addSat(s[o+2], cost)
	}
}

// Decide decides and, if allowed, records the request.
func (a *boundedLog) Decide(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, true)
}

// Peek is Decide without changing the state.
func (a *boundedLog) Peek(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, false)
}

// Record adds cost units at now without checking the limit. An event older
// than the newest entry joins the entry that covers its time (the latest one
// starting at or before it), or a new oldest entry if it predates them all.
func (a *boundedLog) Record(s []int64, now, cost int64) {
	s = s[:a.words:a.words]
	if cost < 1 {
		return
	}
	a.repair(s)
	cost = min(cost, MaxLimit)
	latest, drop, _, _ := a.view(s, now)
	s[1] = (s[1] + drop) % a.size
	s[0] -= drop
	now, n := clampTime(now), s[0]
	if n == 0 || now >= s[a.at(s, n-1)+1] {
		a.add(s, now, cost, latest-a.window)
		return
	}
	if now <= latest-a.window {
		return // it would be dropped right away
	}
	for i := n - 1; i >= 0; i-- {
		o := a.at(s, i)
		if s[o] <= now {
			s[o+1], s[o+2] = max(s[o+1], now), addSat(s[o+2], cost)
			return
		}
	}
	if n < a.size {
		s[1] = (s[1] + a.size - 1) % a.size
		s[0]++
		o := a.at(s, 0)
		s[o], s[o+1], s[o+2] = now, now, cost
		return
	}
	o := a.at(s, 0)
	s[o], s[o+2] = now, addSat(s[o+2], cost)
}
