package algorithm

import "time"

// concurrency counts requests in flight: Decide takes cost units, Release
// gives them back. If Window is positive, a state no Decide, Record or
// Release has touched for longer than Window is treated as empty, so slots
// leaked by requests that never released (a crashed caller) come back.
//
// State: [0] units in flight, [1] the time of the last change.
type concurrency struct {
	base
	limit, window int64
}

func newConcurrency(c Config) *concurrency {
	idle := time.Duration(0)
	if c.Window > 0 {
		idle = c.Window + 1
	}
	a := &concurrency{
		base:   base{cfg: c, words: 2, idle: idle},
		limit:  c.Limit,
		window: int64(c.Window),
	}
	a.withParams(Params{})
	return a
}

// view returns now (never before the last change) and the units in
// flight, first zeroing a state no concurrency could have written.
func (a *concurrency) view(s []int64, now int64) (t, n int64) {
	if s[0] < 0 || s[1] < 0 || s[1] > MaxTime {
		clear(s)
	}
	now = max(clampTime(now), s[1])
	n = s[0]
	if a.window > 0 && now-s[1] > a.window {
		n = 0
	}
	return now, n
}

// expiry returns how long until a state last changed at last is treated as
// empty, or 0 if it never is.
func (a *concurrency) expiry(now, last, n int64) time.Duration {
	if a.window == 0 || n == 0 {
		return 0
	}
	return time.Duration(last + a.window + 1 - now)
}

// Decide decides and, if allowed, records the request.
func (a *concurrency) Decide(s []int64, now, cost int64) Decision {
	s = s[:2:2]
	now, n := a.view(s, now)
	d := Decision{Limit: a.limit, Remaining: nonNeg(a.limit - n)}
	if r := badCost(cost, a.limit); r != "" {
		d.ResetAfter, d.Reason = a.expiry(now, s[1], n), r
		return d
	}
	if n+cost > a.limit {
		// Only a Release can make room sooner than the leak guard.
		d.ResetAfter, d.Reason = a.expiry(now, s[1], n), ReasonOverLimit
		d.RetryAfter = d.ResetAfter
		return d
	}
	n += cost
	s[0], s[1] = n, now
	d.Allowed, d.Remaining = true, a.limit-n
	d.ResetAfter = a.expiry(now, now, n)
	return d
}

// Peek is Decide on a copy of the state, which it leaves unchanged.
func (a *concurrency) Peek(s []int64, now, cost int64) Decision {
	var c [2]int64
	copy(c[:], s[:2])
	return a.Decide(c[:], now, cost)
}

// Record counts cost units as in flight without checking.
func (a *concurrency) Record(s []int64, now, cost int64) {
	s = s[:2:2]
	if cost < 1 {
		return
	}
	now, n := a.view(s, now)
	s[0], s[1] = addSat(n, min(cost, MaxLimit)), now
}

// Release gives back cost units, never going below zero.
func (a *concurrency) Release(s []int64, now, cost int64) {
	s = s[:2:2]
	if cost < 1 {
		return
	}
	now, n := a.view(s, now)
	s[0], s[1] = nonNeg(n-cost), now
}
