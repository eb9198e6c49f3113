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
// k*m + 1 <= L, k <= floor((L-1)/m). So Decide alone keeps at most
// floor((L-1)/m) + 2 <= ceil(L/m) + 2 entries; a test checks it on random
// traffic. Record, which merges counts taken elsewhere, also closes entries
// that span ceil(W*m/L) (see Record), so the ring holds 2*ceil(L/m) + 2
// entries. Only when it is full does Record put more than m units in an
// entry, rather than lose units.
//
// State: [0] number of entries, [1] index of the oldest entry in the ring,
// then 2*ceil(L/m) + 2 entries of three words: first, last, count.
type boundedLog struct {
	base
	limit, window int64
	m             int64 // units per entry
	size          int64 // entries in the ring
	span          int64 // Record's entries span less than this: ceil(W*m/L)
}

// boundedLogSize returns the units per entry and the ring size for limit l
// and tolerance e: room for Decide's ceil(l/m)+2 entries and as many again
// for the time-capped entries Record makes of late events.
func boundedLogSize(l int64, e float64) (m, size int64) {
	m = max(1, int64(e*float64(l)))
	return m, 2*((l+m-1)/m) + 2
}

func newBoundedLog(c Config) *boundedLog {
	m, size := boundedLogSize(c.Limit, c.Tolerance)
	return &boundedLog{
		base:   base{cfg: c, words: 2 + 3*int(size), idle: c.Window},
		limit:  c.Limit,
		window: int64(c.Window),
		m:      m,
		size:   size,
		span:   mulDivUp(int64(c.Window), m, c.Limit),
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

// Record adds cost units at now without checking the limit, as merges of
// counts taken elsewhere do. Its entries hold at most m units, as Decide's
// do, and also span less than span (the time L units at the limit's even
// rate take to fill one: ceil(W·m/L)); that is why the ring has room for
// twice as many entries as Decide needs.
//
// An event at or after the newest entry's last timestamp is appended. An
// older one (a late event, pushed by another node) goes, while there is
// room, to:
//
//   - the entry that covers its time (the latest one starting at or before
//     it), moving that entry's last timestamp up to it if need be;
//   - if the event falls after a full covering entry, into the gap: the next
//     entry, its first timestamp moved down to the event, or a new entry;
//   - if it falls inside a full entry, the first later entry with room, its
//     first timestamp moved down to the end of the entry before it when that
//     keeps its span, or else a new entry at the end of the full one. This
//     is the one place an event is counted as later than it happened: an
//     overcount by at most the full entry's span, never an undercount;
//   - if it predates every entry, the oldest entry, its first timestamp moved
//     down, or a new oldest entry.
//
// So entries stay in time order without overlapping and every unit lies at
// or before its entry's last timestamp: at most one entry straddles t-W, and
// the log undercounts (t-W, t] by at most m. Only when the ring is full do
// units go beyond m, into the entry covering their time.
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
	now = clampTime(now)
	if n := s[0]; n == 0 || now >= s[a.at(s, n-1)+1] {
		a.add(s, now, cost, max(latest-a.window, now-a.span))
		return
	}
	if now <= latest-a.window {
		return // it would be dropped right away
	}
	for cost > 0 {
		n := s[0]
		i := n - 1
		for i >= 0 && s[a.at(s, i)] > now {
			i--
		}
		var o int64 // the entry that takes units, after setting its times
		switch {
		case i < 0: // before every entry
			o = a.at(s, 0)
			if !a.room(s[o+2], now, s[o+1]) {
				if n < a.size {
					o = a.insert(s, 0, now)
					break
				}
				s[o], s[o+2] = now, addSat(s[o+2], cost) // the ring is full
				return
			}
			s[o] = now
		case s[a.at(s, i)+2] < a.m && (now <= s[a.at(s, i)+1] || a.room(0, s[a.at(s, i)], now)):
			o = a.at(s, i)
			s[o+1] = max(s[o+1], now)
		case now > s[a.at(s, i)+1]: // in the gap after a full entry
			if o = a.at(s, i+1); a.room(s[o+2], now, s[o+1]) {
				s[o] = now
				break
			}
			if n < a.size {
				o = a.insert(s, i+1, now)
				break
			}
			o = a.at(s, i)
			s[o+1], s[o+2] = now, addSat(s[o+2], cost) // the ring is full
			return
		default: // inside a full entry
			j := i + 1
			for j < n && s[a.at(s, j)+2] >= a.m {
				j++
			}
			if j < n {
				o = a.at(s, j)
				if t := max(now, s[a.at(s, j-1)+1]); s[o+1]-t < a.span {
					s[o] = min(s[o], t)
				}
				break
			}
			if n < a.size {
				o = a.insert(s, i+1, s[a.at(s, i)+1])
				break
			}
			o = a.at(s, i)
			s[o+2] = addSat(s[o+2], cost) // the ring is full
			return
		}
		k := min(cost, a.m-s[o+2])
		s[o+2] += k
		cost -= k
	}
}

// room reports whether an entry of count units from first to last may take
// more units from Record.
func (a *boundedLog) room(count, first, last int64) bool {
	return count < a.m && last-first < a.span
}

// insert puts an empty entry at time t at index i, moving the entries from
// i on one place newer, and returns its offset. The ring must not be full.
func (a *boundedLog) insert(s []int64, i, t int64) int64 {
	n := s[0]
	if i == 0 {
		s[1] = (s[1] + a.size - 1) % a.size
	} else {
		for j := n; j > i; j-- {
			d, o := a.at(s, j), a.at(s, j-1)
			s[d], s[d+1], s[d+2] = s[o], s[o+1], s[o+2]
		}
	}
	s[0] = n + 1
	o := a.at(s, i)
	s[o], s[o+1], s[o+2] = t, t, 0
	return o
}
