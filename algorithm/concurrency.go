package algorithm

import (
	"time"

	"github.com/floodgate-dev/floodgate/lease"
)

// concurrency counts requests in flight. Units are held two ways:
//
//   - under a lease (Acquire): each lease has an id, a cost and an expiry,
//     and only ReleaseLease with its id gives its units back, once; a lease
//     not released expires LeaseTTL after it was taken, so a holder that
//     crashed does not hold its slot for ever, however busy the key;
//   - anonymously (Decide, Record): the units are given back by Release, or
//     when no Decide, Record, Acquire or Release has touched the key for
//     longer than Window (if Window is positive).
//
// State: [0] anonymous units, [1] the time of the last change, [2] the
// number of leases n, then n leases of four words each: the id's two
// halves, the expiry time and the cost.
type concurrency struct {
	base
	limit, window int64
	ttl           int64 // a lease's life, ns
	maxLeases     int64
}

const (
	ccHeader = 3 // words before the first lease
	ccLease  = 4 // words per lease
)

func newConcurrency(c Config) *concurrency {
	idle := time.Duration(0)
	if c.Window > 0 {
		idle = c.Window + 1
	}
	ttl := c.Window
	if ttl <= 0 {
		ttl = lease.DefaultTTL
	}
	n := min(c.Limit, lease.MaxPerKey)
	a := &concurrency{
		base:      base{cfg: c, words: ccHeader + ccLease*int(n), idle: idle},
		limit:     c.Limit,
		window:    int64(c.Window),
		ttl:       int64(ttl),
		maxLeases: n,
	}
	a.withParams(Params{LeaseTTL: ttl, MaxLeases: n})
	return a
}

// Leaser is an algorithm that holds units under leases: the concurrency
// algorithm. Stores find it with a type assertion.
type Leaser interface {
	// Acquire decides a request of cost units at now and, if it is
	// allowed, holds them under lease id until ReleaseLease or until the
	// lease expires (Params.LeaseTTL after now). Acquiring an id the state
	// already holds adds cost to that lease.
	Acquire(state []int64, now, cost int64, id lease.ID) Decision
	// ReleaseLease gives back the units lease id holds and reports whether
	// it held any: false for an id never acquired in this state, already
	// released or expired, which changes nothing.
	ReleaseLease(state []int64, now int64, id lease.ID) bool
}

var _ Leaser = (*concurrency)(nil)

// leaseWords returns the words of lease i of s.
func leaseWords(s []int64, i int64) []int64 {
	o := ccHeader + ccLease*i
	return s[o : o+ccLease : o+ccLease]
}

// valid reports whether s could have been written by a.
func (a *concurrency) valid(s []int64) bool {
	return s[0] >= 0 && s[1] >= 0 && s[1] <= maxTime && s[2] >= 0 && s[2] <= a.maxLeases
}

// look returns now (never before the last change), the units in flight
// in s at now and the leases that have not expired, without changing s.
func (a *concurrency) look(s []int64, now int64) (t, n, live int64) {
	if !a.valid(s) {
		return clampTime(now), 0, 0
	}
	now = max(clampTime(now), s[1])
	if a.window == 0 || now-s[1] <= a.window {
		n = s[0]
	}
	for i := int64(0); i < s[2]; i++ {
		if l := leaseWords(s, i); l[2] > now && l[3] > 0 {
			n = addSat(n, l[3])
			live++
		}
	}
	return now, n, live
}

// compact zeroes a state no concurrency could have written, and drops what
// has expired at now: anonymous units past the leak guard and leases past
// their expiry. What s counts does not change.
func (a *concurrency) compact(s []int64, now int64) {
	if !a.valid(s) {
		clear(s)
		return
	}
	now = max(clampTime(now), s[1])
	if a.window > 0 && now-s[1] > a.window {
		s[0] = 0
	}
	for i := int64(0); i < s[2]; {
		if l := leaseWords(s, i); l[2] <= now || l[3] < 1 {
			a.drop(s, i)
			continue
		}
		i++
	}
}

// drop removes lease i, moving the last lease into its place.
func (a *concurrency) drop(s []int64, i int64) {
	last := s[2] - 1
	copy(leaseWords(s, i), leaseWords(s, last))
	clear(leaseWords(s, last))
	s[2] = last
}

// leases returns the number of leases of s, 0 for a state a could not
// have written.
func (a *concurrency) leases(s []int64) int64 {
	if !a.valid(s) {
		return 0
	}
	return s[2]
}

// find returns the index of lease id in s, or -1.
func (a *concurrency) find(s []int64, id lease.ID) int64 {
	for i := range a.leases(s) {
		if l := leaseWords(s, i); l[0] == id.Hi && l[1] == id.Lo {
			return i
		}
	}
	return -1
}

// expiry returns how long after now the earliest units in flight come
// back by themselves, or 0 if none will: anonymous units held since last
// (anon of them), and the leases of s that have not expired.
func (a *concurrency) expiry(s []int64, now, last, anon int64) time.Duration {
	e := int64(0)
	if a.window > 0 && anon > 0 {
		e = last + a.window + 1 - now
	}
	for i := range a.leases(s) {
		if l := leaseWords(s, i); l[2] > now && l[3] > 0 && (e == 0 || l[2]-now < e) {
			e = l[2] - now
		}
	}
	return time.Duration(max(e, 0))
}

// anon returns the anonymous units s counts at now (a valid s).
func (a *concurrency) anon(s []int64, now int64) int64 {
	if a.window > 0 && now-s[1] > a.window {
		return 0
	}
	return s[0]
}

// held returns the index of the lease id in s if it has not expired at
// now, or -1.
func (a *concurrency) held(s []int64, now int64, id lease.ID) int64 {
	i := a.find(s, id)
	if i >= 0 {
		if l := leaseWords(s, i); l[2] <= now || l[3] < 1 {
			return -1
		}
	}
	return i
}

// decide decides a request of cost at now and, if it is allowed and commit
// is set, records it, under lease id unless id is zero. s changes only
// when the request is recorded.
func (a *concurrency) decide(s []int64, now, cost int64, id lease.ID, commit bool) Decision {
	s = s[:a.words:a.words]
	now, n, live := a.look(s, now)
	last, anon := int64(0), int64(0)
	if a.valid(s) {
		last, anon = s[1], a.anon(s, now)
	}
	d := Decision{Limit: a.limit, Remaining: nonNeg(a.limit - n)}
	if r := badCost(cost, a.limit); r != "" {
		d.ResetAfter, d.Reason = a.expiry(s, now, last, anon), r
		return d
	}
	leased := id != (lease.ID{})
	if n+cost > a.limit || (leased && live >= a.maxLeases && a.held(s, now, id) < 0) {
		// Only a release or an expiry makes room.
		d.ResetAfter, d.Reason = a.expiry(s, now, last, anon), ReasonOverLimit
		d.RetryAfter = d.ResetAfter
		return d
	}
	d.Allowed, d.Remaining = true, a.limit-n-cost
	if !commit {
		// As if an anonymous unit were taken now.
		d.ResetAfter = a.expiry(s, now, now, anon+cost)
		return d
	}
	a.compact(s, now)
	s[1] = now
	switch at := a.find(s, id); {
	case !leased:
		s[0] += cost
	case at >= 0:
		l := leaseWords(s, at)
		l[2], l[3] = now+a.ttl, l[3]+cost
	default:
		l := leaseWords(s, s[2])
		l[0], l[1], l[2], l[3] = id.Hi, id.Lo, now+a.ttl, cost
		s[2]++
	}
	d.ResetAfter = a.expiry(s, now, now, s[0])
	return d
}

// Decide decides and, if allowed, holds the units anonymously.
func (a *concurrency) Decide(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, lease.ID{}, true)
}

// Acquire decides and, if allowed, holds the units under lease id. An
// invalid id is rejected as a bad cost would be.
func (a *concurrency) Acquire(s []int64, now, cost int64, id lease.ID) Decision {
	if !id.Valid() {
		return Decision{Limit: a.limit, Reason: ReasonBadCost}
	}
	return a.decide(s, now, cost, id, true)
}

// Peek is Decide without changing the state.
func (a *concurrency) Peek(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, lease.ID{}, false)
}

// Record counts cost units as in flight, anonymously, without checking.
func (a *concurrency) Record(s []int64, now, cost int64) {
	s = s[:a.words:a.words]
	if cost < 1 {
		return
	}
	a.compact(s, now)
	now, _, _ = a.look(s, now)
	s[0], s[1] = addSat(s[0], min(cost, MaxLimit)), now
}

// Release gives back cost anonymous units, never going below zero; units
// held under a lease are given back only by ReleaseLease.
func (a *concurrency) Release(s []int64, now, cost int64) {
	s = s[:a.words:a.words]
	if cost < 1 {
		return
	}
	a.compact(s, now)
	now, _, _ = a.look(s, now)
	s[0], s[1] = nonNeg(s[0]-cost), now
}

// ReleaseLease gives back what lease id holds, once.
func (a *concurrency) ReleaseLease(s []int64, now int64, id lease.ID) bool {
	s = s[:a.words:a.words]
	if !id.Valid() {
		return false
	}
	t, _, _ := a.look(s, now)
	if a.held(s, t, id) < 0 {
		return false // not held: the state is left as it is
	}
	a.compact(s, now)
	a.drop(s, a.find(s, id))
	s[1] = t
	return true
}

// UsedWords returns how many leading words of s may be nonzero: the
// header and its leases.
func (a *concurrency) UsedWords(s []int64) int {
	n := s[2]
	if n < 0 || n > a.maxLeases {
		return a.words
	}
	return ccHeader + ccLease*int(n)
}

// HalfWords reports false: lease ids and times need whole words.
func (a *concurrency) HalfWords() bool { return false }
