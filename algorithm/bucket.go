package algorithm

import "time"

// bucket is the generic cell rate algorithm, which serves both the token
// bucket and GCRA: a bucket of capacity units refilled one unit every
// interval nanoseconds is the same thing as a theoretical arrival time (tat)
// that each accepted unit pushes interval later, with a request accepted
// when tat stays within capacity*interval of now. Everything is integer
// arithmetic, so a Lua script can reproduce it exactly.
//
// State: [0] tat, [1] the latest time seen.
type bucket struct {
	base
	limit    int64 // reported as Decision.Limit
	capacity int64 // most units accepted at once
	interval int64 // nanoseconds per unit (the emission interval)
	span     int64 // capacity*interval: the time a bucket takes to refill
}

func newBucket(c Config, limit, capacity, interval int64) *bucket {
	span := capacity * interval
	a := &bucket{
		base:     base{cfg: c, words: 2, idle: time.Duration(2 * span)},
		limit:    limit,
		capacity: capacity,
		interval: interval,
		span:     span,
	}
	a.withParams(Params{Limit: limit, Capacity: capacity, Interval: time.Duration(interval)})
	return a
}

// In redis_rate's terms: increment = cost*interval, burst_offset = span,
// new_tat = max(tat, now) + increment, allow_at = new_tat - burst_offset,
// diff = now - allow_at; accepted iff diff >= 0, and then remaining =
// floor(diff/interval), reset_after = new_tat - now; rejected, retry_after =
// -diff and reset_after = tat - now.
// repairTAT zeroes a bucket state no bucket could have written.
func repairTAT(s []int64) {
	if s[0] < 0 || s[0] > maxTime+maxAhead || s[1] < 0 || s[1] > maxTime {
		clear(s)
	}
}

// Decide decides and, if allowed, records the request.
func (a *bucket) Decide(s []int64, now, cost int64) (d Decision) {
	a.decideInto(&d, s, now, cost)
	return d
}

// decideInto is Decide writing the decision into *d, every field of it
// (see Direct).
func (a *bucket) decideInto(d *Decision, s []int64, now, cost int64) {
	s = s[:2:2]
	repairTAT(s)
	now = max(clampTime(now), s[1])
	tat := max(s[0], now)
	// Computed before the cost is checked: for a bad cost they may wrap,
	// and are not used.
	newTat := tat + cost*a.interval
	diff := now - (newTat - a.span)
	if cost < 1 || cost > a.capacity || diff < 0 {
		// Remaining counts what a smaller request could still take; for a
		// request of cost 1 it is 0, as in redis_rate.
		*d = Decision{Limit: a.limit, Remaining: nonNeg(a.span-(tat-now)) / a.interval, ResetAfter: time.Duration(tat - now)}
		if d.Reason = badCost(cost, a.capacity); d.Reason == "" {
			d.Reason, d.RetryAfter = ReasonOverLimit, time.Duration(-diff)
		}
		return
	}
	s[0], s[1] = newTat, now
	*d = Decision{Allowed: true, Limit: a.limit, Remaining: diff / a.interval, ResetAfter: time.Duration(newTat - now)}
}

// Peek is Decide on a copy of the state, which it leaves unchanged.
func (a *bucket) Peek(s []int64, now, cost int64) Decision {
	var c [2]int64
	copy(c[:], s[:2])
	return a.Decide(c[:], now, cost)
}

// Record takes cost units (at most a full bucket per call) without checking;
// the bucket may go into debt by at most one more full bucket, so a state
// still equals a zero one IdleAfter (two refill spans) after its last update
// and a store that expires idle keys forgives no debt.
func (a *bucket) Record(s []int64, now, cost int64) {
	recordTAT(s, now, cost, a.capacity, a.interval, 2*a.span)
}

// recordTAT moves the theoretical arrival time of state s on by cost units
// (at most most of them) of interval each, at now, never letting it run more
// than debt past the state's latest time. The token bucket, GCRA and the
// leaky bucket record events this way; a cost below 1 records nothing.
func recordTAT(s []int64, now, cost, most, interval, debt int64) {
	s = s[:2:2]
	if cost < 1 {
		return
	}
	repairTAT(s)
	now = clampTime(now)
	s[0] = min(max(s[0], now)+min(cost, most)*interval, max(s[1], now)+debt)
	s[1] = max(s[1], now)
}
