package algorithm

import "time"

// fixedWindow counts units in windows aligned to multiples of Window.
//
// State: [0] the window's number (start/Window), [1] units counted in it.
type fixedWindow struct {
	base
	limit, window int64
	lastWindow    int64 // MaxTime / window: the last window number a state can hold
}

func newFixedWindow(c Config) *fixedWindow {
	a := &fixedWindow{
		base:       base{cfg: c, words: 2, idle: c.Window},
		limit:      c.Limit,
		window:     int64(c.Window),
		lastWindow: MaxTime / int64(c.Window),
	}
	a.withParams(Params{})
	return a
}

// view returns the window now falls in, the units counted in it, and now
// moved forward if the clock went back to an earlier window.
func (a *fixedWindow) view(s []int64, now int64) (k, n, t int64) {
	now = clampTime(now)
	k, n = now/a.window, s[1]
	switch {
	case k < s[0]: // clock went back: keep counting in the newest window
		k, now = s[0], s[0]*a.window
	case k > s[0]:
		n = 0
	}
	return k, n, now
}

// repair zeroes a state no fixedWindow could have written.
func (a *fixedWindow) repair(s []int64) {
	if s[0] < 0 || s[0] > a.lastWindow || s[1] < 0 {
		clear(s)
	}
}

// Decide decides and, if allowed, records the request.
func (a *fixedWindow) Decide(s []int64, now, cost int64) Decision {
	s = s[:2:2]
	a.repair(s)
	k, n, now := a.view(s, now)
	d := Decision{Limit: a.limit, ResetAfter: time.Duration((k+1)*a.window - now)}
	if r := badCost(cost, a.limit); r != "" {
		d.Remaining, d.Reason = nonNeg(a.limit-n), r
		return d
	}
	if n+cost > a.limit {
		d.Remaining, d.Reason = nonNeg(a.limit-n), ReasonOverLimit
		d.RetryAfter = d.ResetAfter
		return d
	}
	n += cost
	s[0], s[1] = k, n
	d.Allowed, d.Remaining = true, a.limit-n
	return d
}

// Peek is Decide on a copy of the state, which it leaves unchanged.
func (a *fixedWindow) Peek(s []int64, now, cost int64) Decision {
	var c [2]int64
	copy(c[:], s[:2])
	return a.Decide(c[:], now, cost)
}

// Record adds cost to the window now falls in; an event from a window older
// than the state's no longer counts and is dropped.
func (a *fixedWindow) Record(s []int64, now, cost int64) {
	s = s[:2:2]
	if cost < 1 {
		return
	}
	a.repair(s)
	now = clampTime(now)
	k := now / a.window
	switch {
	case k < s[0]:
		return
	case k > s[0]:
		s[0], s[1] = k, 0
	}
	s[1] = addSat(s[1], min(cost, MaxLimit))
}
