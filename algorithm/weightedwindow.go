package algorithm

import "time"

// weightedWindow is Cloudflare's sliding window estimate: two counters for
// the current and previous aligned windows, the previous one weighted by how
// much of it the sliding window still overlaps:
//
//	estimate = ceil(prev*(W-elapsed)/W) + curr
//
// Rounding up keeps the estimate from ever being below the weighted sum.
//
// State: [0] the current window's number, [1] its count, [2] the previous
// window's count.
type weightedWindow struct {
	base
	limit, window int64
	lastWindow    int64 // maxTime / window: the last window number a state can hold
}

func newWeightedWindow(c Config) *weightedWindow {
	a := &weightedWindow{
		base:       base{cfg: c, words: 3, idle: 2 * c.Window},
		limit:      c.Limit,
		window:     int64(c.Window),
		lastWindow: maxTime / int64(c.Window),
	}
	a.withParams(Params{})
	return a
}

// view returns the window now falls in (never before the one in s), the
// time elapsed in it, and the current and previous counts as of now.
func (a *weightedWindow) view(s []int64, now int64) (k, elapsed, curr, prev int64) {
	now = clampTime(now)
	// The state's own window in the common case, found without dividing
	// (s[0] <= lastWindow, so start cannot overflow).
	k = s[0]
	switch start := k * a.window; {
	case now < start: // the clock went back: use the newest window
		return k, 0, s[1], s[2]
	case now-start < a.window:
		return k, now - start, s[1], s[2]
	}
	k = now / a.window
	if k == s[0]+1 {
		prev = s[1]
	}
	return k, now - k*a.window, 0, prev
}

// estimate returns the weighted count.
func (a *weightedWindow) estimate(elapsed, curr, prev int64) int64 {
	if prev == 0 {
		return curr
	}
	return curr + mulDivUp(prev, a.window-elapsed, a.window)
}

// reset returns how long until the estimate is 0 if nothing else comes.
func (a *weightedWindow) reset(elapsed, curr, prev int64) time.Duration {
	switch {
	case curr > 0:
		return time.Duration(2*a.window - elapsed)
	case prev > 0:
		return time.Duration(a.window - elapsed)
	}
	return 0
}

// repair zeroes a state no weightedWindow could have written.
func (a *weightedWindow) repair(s []int64) {
	if s[0] < 0 || s[0] > a.lastWindow || s[1] < 0 || s[2] < 0 {
		clear(s)
	}
}

// Decide decides and, if allowed, records the request.
func (a *weightedWindow) Decide(s []int64, now, cost int64) (d Decision) {
	a.decideInto(&d, s, now, cost)
	return d
}

// decideInto is Decide writing the decision into *d, every field of it
// (see Direct).
func (a *weightedWindow) decideInto(d *Decision, s []int64, now, cost int64) {
	s = s[:3:3]
	a.repair(s)
	k, elapsed, curr, prev := a.view(s, now)
	est := a.estimate(elapsed, curr, prev)
	if cost < 1 || cost > a.limit || est+cost > a.limit {
		*d = Decision{Limit: a.limit, Remaining: nonNeg(a.limit - est), ResetAfter: a.reset(elapsed, curr, prev)}
		if d.Reason = badCost(cost, a.limit); d.Reason == "" {
			d.Reason = ReasonOverLimit
			d.RetryAfter = time.Duration(a.retryAfter(elapsed, curr, prev, cost))
		}
		return
	}
	curr += cost
	s[0], s[1], s[2] = k, curr, prev
	*d = Decision{Allowed: true, Limit: a.limit, Remaining: nonNeg(a.limit - est - cost), ResetAfter: a.reset(elapsed, curr, prev)}
}

// retryAfter returns the time until a request of cost is accepted, for one
// rejected now. ceil(p*(W-e)/W) <= r holds iff W-e <= floor(r*W/p), so the
// earliest such elapsed time is W - floor(r*W/p).
func (a *weightedWindow) retryAfter(elapsed, curr, prev, cost int64) int64 {
	w := a.window
	if r := a.limit - curr - cost; r >= 0 {
		// Later in this window (r < prev, or it would have been accepted).
		return w - mulDiv(r, w, prev) - elapsed
	}
	// In the next window, curr becomes the previous count.
	r := a.limit - cost
	if curr <= r {
		return w - elapsed
	}
	return w - elapsed + w - mulDiv(r, w, curr)
}

// Peek is Decide on a copy of the state, which it leaves unchanged.
func (a *weightedWindow) Peek(s []int64, now, cost int64) Decision {
	var c [3]int64
	copy(c[:], s[:3])
	return a.Decide(c[:], now, cost)
}

// Record adds cost to the window now falls in, or to the previous count if
// now falls in the window before the state's.
func (a *weightedWindow) Record(s []int64, now, cost int64) {
	s = s[:3:3]
	if cost < 1 {
		return
	}
	a.repair(s)
	cost = min(cost, MaxLimit)
	k := clampTime(now) / a.window
	switch {
	case k == s[0]-1:
		s[2] = addSat(s[2], cost)
		return
	case k < s[0]:
		return
	case k == s[0]+1:
		s[0], s[1], s[2] = k, 0, s[1]
	case k > s[0]:
		s[0], s[1], s[2] = k, 0, 0
	}
	s[1] = addSat(s[1], cost)
}
