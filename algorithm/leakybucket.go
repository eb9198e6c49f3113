package algorithm

import "time"

// leakyBucket is the throttling form of the leaky bucket (nginx's limit_req
// without nodelay): requests leave the bucket one unit every interval, so an
// accepted request is told to wait until its turn, and only a request whose
// wait would exceed maxDelay is rejected.
//
// State: [0] the time the queue drains (when the next request's turn
// comes), [1] the latest time seen.
type leakyBucket struct {
	base
	limit    int64
	interval int64 // nanoseconds per unit
	maxDelay int64
}

func newLeakyBucket(c Config, interval int64) *leakyBucket {
	a := &leakyBucket{
		base:     base{cfg: c, words: 2, idle: c.MaxDelay + time.Duration(c.Limit*interval)},
		limit:    c.Limit,
		interval: interval,
		maxDelay: int64(c.MaxDelay),
	}
	a.withParams(Params{Interval: time.Duration(interval), MaxDelay: c.MaxDelay})
	return a
}

// remaining returns how many requests of cost 1 could still be queued at now
// when the queue drains at free.
func (a *leakyBucket) remaining(now, free int64) int64 {
	wait := free - now
	if wait > a.maxDelay {
		return 0
	}
	return min(a.limit, (a.maxDelay-wait)/a.interval+1)
}

// Decide decides and, if allowed, records the request.
func (a *leakyBucket) Decide(s []int64, now, cost int64) Decision {
	s = s[:2:2]
	repairTAT(s)
	now = max(clampTime(now), s[1])
	free := max(s[0], now)
	wait := free - now
	d := Decision{Limit: a.limit, ResetAfter: time.Duration(wait)}
	if r := badCost(cost, a.limit); r != "" {
		d.Remaining, d.Reason = a.remaining(now, free), r
		return d
	}
	if wait > a.maxDelay {
		d.Reason = ReasonQueueFull
		d.RetryAfter = time.Duration(wait - a.maxDelay)
		return d
	}
	free += cost * a.interval
	s[0], s[1] = free, now
	d.Allowed, d.Delay = true, time.Duration(wait)
	d.Remaining = a.remaining(now, free)
	d.ResetAfter = time.Duration(free - now)
	return d
}

// Peek is Decide on a copy of the state, which it leaves unchanged.
func (a *leakyBucket) Peek(s []int64, now, cost int64) Decision {
	var c [2]int64
	copy(c[:], s[:2])
	return a.Decide(c[:], now, cost)
}

// Record queues cost units (at most Limit per call) without checking.
func (a *leakyBucket) Record(s []int64, now, cost int64) {
	recordTAT(s, now, cost, a.limit, a.interval, int64(a.idle))
}
