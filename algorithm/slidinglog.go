package algorithm

import "time"

// slidingLog keeps one timestamp per accepted unit, oldest first, in a ring
// of Limit slots, and accepts a request iff the units after now-W plus its
// cost are at most Limit. It is exact.
//
// Only the newest Limit timestamps are kept: if Record pushes more, the
// oldest are forgotten, which changes no decision, since while any forgotten
// unit is inside the window all Limit kept ones are too.
//
// State: [0] number of timestamps, [1] ring index of the oldest, then Limit
// timestamps.
type slidingLog struct {
	base
	limit, window int64
}

func newSlidingLog(c Config) *slidingLog {
	a := &slidingLog{
		base:   base{cfg: c, words: 2 + int(c.Limit), idle: c.Window},
		limit:  c.Limit,
		window: int64(c.Window),
	}
	a.withParams(Params{})
	return a
}

// ts returns the i-th oldest timestamp.
func (a *slidingLog) ts(s []int64, i int64) int64 { return s[2+(s[1]+i)%a.limit] }

// view returns now, moved forward to the newest timestamp, and how many of
// the oldest timestamps are at or before now-W.
func (a *slidingLog) view(s []int64, now int64) (t, drop int64) {
	n := s[0]
	now = clampTime(now)
	if n > 0 {
		now = max(now, a.ts(s, n-1))
	}
	for drop < n && a.ts(s, drop) <= now-a.window {
		drop++
	}
	return now, drop
}

// repair zeroes a state whose header no slidingLog could have written.
func (a *slidingLog) repair(s []int64) {
	if s[0] < 0 || s[0] > a.limit || s[1] < 0 || s[1] >= a.limit {
		clear(s)
	}
}

func (a *slidingLog) decide(s []int64, now, cost int64, commit bool) Decision {
	s = s[:a.words:a.words]
	a.repair(s)
	now, drop := a.view(s, now)
	n := s[0] - drop
	d := Decision{Limit: a.limit}
	if n > 0 {
		d.ResetAfter = time.Duration(a.ts(s, s[0]-1) + a.window - now)
	}
	if r := badCost(cost, a.limit); r != "" {
		d.Remaining, d.Reason = a.limit-n, r
		return d
	}
	if n+cost > a.limit {
		// The (n+cost-limit)-th oldest live timestamp must leave the window.
		d.Remaining, d.Reason = a.limit-n, ReasonOverLimit
		d.RetryAfter = time.Duration(a.ts(s, drop+n+cost-a.limit-1) + a.window - now)
		return d
	}
	if commit {
		s[1] = (s[1] + drop) % a.limit
		s[0] = n
		for range cost {
			s[2+(s[1]+s[0])%a.limit] = now
			s[0]++
		}
	}
	d.Allowed, d.Remaining = true, a.limit-n-cost
	d.ResetAfter = time.Duration(a.window)
	return d
}

// Decide decides and, if allowed, records the request.
func (a *slidingLog) Decide(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, true)
}

// Peek is Decide without changing the state.
func (a *slidingLog) Peek(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, false)
}

// Record inserts cost timestamps at now in order, keeping the newest Limit.
func (a *slidingLog) Record(s []int64, now, cost int64) {
	s = s[:a.words:a.words]
	if cost < 1 {
		return
	}
	a.repair(s)
	latest, drop := a.view(s, now)
	s[1] = (s[1] + drop) % a.limit
	s[0] -= drop
	now = clampTime(now)
	if now <= latest-a.window {
		return
	}
	at := func(i int64) *int64 { return &s[2+(s[1]+i)%a.limit] }
	for range min(cost, a.limit) {
		if s[0] == a.limit { // full: forget the oldest
			if *at(0) > now {
				return // everything kept is newer than this event
			}
			s[1] = (s[1] + 1) % a.limit
			s[0]--
		}
		// Insertion sort from the newest end.
		i := s[0]
		for ; i > 0 && *at(i - 1) > now; i-- {
			*at(i) = *at(i - 1)
		}
		*at(i) = now
		s[0]++
	}
}
