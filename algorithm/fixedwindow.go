package algorithm

import "time"

// fixedWindow counts units in windows aligned to multiples of Window.
//
// State: [0] the window's number (start/Window), [1] units counted in it.
type fixedWindow struct {
	base
	limit, window int64
	lastWindow    int64 // maxTime / window: the last window number a state can hold
}

func newFixedWindow(c Config) *fixedWindow {
	a := &fixedWindow{
		base:       base{cfg: c, words: 2, idle: c.Window},
		limit:      c.Limit,
		window:     int64(c.Window),
		lastWindow: maxTime / int64(c.Window),
	}
	a.withParams(Params{})
	return a
}

// repair zeroes a state no fixedWindow could have written.
func (a *fixedWindow) repair(s []int64) {
	if s[0] < 0 || s[0] > a.lastWindow || s[1] < 0 {
		clear(s)
	}
}

// Decide decides and, if allowed, records the request.
func (a *fixedWindow) Decide(s []int64, now, cost int64) (d Decision) {
	a.decideInto(&d, s, now, cost)
	return d
}

// decideInto is Decide writing the decision into *d, every field of it
// (see Direct).
func (a *fixedWindow) decideInto(d *Decision, s []int64, now, cost int64) {
	s = s[:2:2]
	a.repair(s)
	now = clampTime(now)
	// The window now falls in: the state's own in the common case, found
	// without dividing (k <= lastWindow, so start cannot overflow).
	k, n := s[0], s[1]
	switch start := k * a.window; {
	case now < start: // clock went back: keep counting in the newest window
		now = start
	case now-start >= a.window:
		k, n = now/a.window, 0
	}
	reset := time.Duration((k+1)*a.window - now)
	if cost < 1 || cost > a.limit || n+cost > a.limit {
		*d = Decision{Limit: a.limit, Remaining: nonNeg(a.limit - n), ResetAfter: reset}
		if d.Reason = badCost(cost, a.limit); d.Reason == "" {
			d.Reason, d.RetryAfter = ReasonOverLimit, reset
		}
		return
	}
	n += cost
	s[0], s[1] = k, n
	*d = Decision{Allowed: true, Limit: a.limit, Remaining: a.limit - n, ResetAfter: reset}
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

// Used returns the units counted in the window now falls in (past the
// limit when a charge overspent it).
func (a *fixedWindow) Used(s []int64, now int64) int64 {
	var c [2]int64
	copy(c[:], s[:2])
	a.repair(c[:])
	if now = clampTime(now); now-c[0]*a.window >= a.window {
		return 0
	}
	return c[1]
}
