package algorithm

import (
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/lease"
)

// Holds: parts of a key's allowance set aside for the clients that decide
// for it themselves (quota leases).
//
// A holder takes a number of units with one call and spends them without
// calling. Units it holds are counted by every decision on the key from the
// moment they are granted; when the holder reports units spent they are
// recorded at that moment (after they were spent) and stop being held; when
// it gives the rest back they stop counting. So every unit a holder spends
// at time s is counted by every decision made between its grant and s+W,
// and the algorithm's own bound on any W-long interval holds for the times
// the units were really spent, however long a holder keeps them: take any
// interval, the last decision among its units counted all of them. A hold
// not renewed by its expiry is recorded in full at the next operation on
// the key that changes it, any but a rejected decision (its holder may
// have spent all of it): an expired holder costs
// allowance, never hands it out.
//
// An algorithm New builds with Config.Holds > 0 has a method
//
//	Hold(state []int64, now, cost int64, op lease.Op) (Decision, lease.Held)
//
// which a store finds with a type assertion (see held.Hold).
//
// Holds exist only for bounded-log, sliding-log and fixed-window, whose
// Peek(cost) answers exactly "count + cost within the limit", and whose
// bounds hold on the times units were spent by the argument above.
//
// State: the inner algorithm's words, then the number of holds n, then n
// holds of holdWords words each: the lease id's two halves, the expiry, the
// units held, the holder's target, and seq*2 + 1 if the holder's last
// operation had its cost allowed (else seq*2).

// The holds' bounds: a key keeps at most lease.MaxPerKey holds; a hold
// lasts defaultHoldTTL unless Config.HoldTTL says otherwise.
const defaultHoldTTL = 10 * time.Second

const holdWords = 6

// held is an algorithm with holds.
type held struct {
	base
	in    Algorithm
	iw    int   // the inner state's words
	limit int64 // the inner limit
	ttl   int64
	holds int64
	// scratch holds states of h.words words for Decide, which decides on a
	// copy when a hold has expired: a flood of rejected requests on such a
	// key then allocates nothing.
	scratch sync.Pool
}

// withHolds wraps in, built from c without its holds, with c.Holds holds.
func withHolds(in Algorithm, c Config) (*held, error) {
	switch c.Algorithm {
	case BoundedLog, SlidingLog, FixedWindow:
	default:
		return nil, fmt.Errorf("%s: holds (quota leases) need bounded-log, sliding-log or fixed-window", c.Algorithm)
	}
	if !c.Calendar.IsZero() || c.CarryOver != 0 {
		return nil, fmt.Errorf("%s: holds (quota leases) need a rolling window, not a calendar one", c.Algorithm)
	}
	if c.Holds < 0 || c.Holds > lease.MaxPerKey {
		return nil, fmt.Errorf("%s: holds must be between 0 and %d, got %d", c.Algorithm, lease.MaxPerKey, c.Holds)
	}
	if c.HoldTTL < 0 || c.HoldTTL > MaxWindow {
		return nil, fmt.Errorf("%s: hold ttl must be between 0 and %v, got %v", c.Algorithm, MaxWindow, c.HoldTTL)
	}
	if c.HoldTTL == 0 {
		c.HoldTTL = defaultHoldTTL
	}
	iw := in.Words()
	h := &held{
		base:  base{cfg: c, words: iw + 1 + holdWords*c.Holds, idle: in.IdleAfter() + c.HoldTTL},
		in:    in,
		iw:    iw,
		limit: c.Limit,
		ttl:   int64(c.HoldTTL),
		holds: int64(c.Holds),
	}
	p := in.(interface{ Params() Params }).Params()
	p.Holds, p.HoldTTL = int64(c.Holds), c.HoldTTL
	p.Words, p.IdleAfter = h.words, h.idle
	h.p = p
	return h, nil
}

// Name is the inner algorithm's name.
func (h *held) Name() Name { return h.in.Name() }

// convertFrom converts the inner state of from, an algorithm with holds of
// the same Identity (so the same holds and ttl), and keeps its holds as
// they are: held units stay held, whatever the new limit.
func (h *held) convertFrom(from Algorithm, src, dst []int64, now int64) {
	f, ok := from.(*held)
	if !ok || f.holds != h.holds {
		return // the zero state
	}
	if convert(f.in, h.in, src[:f.iw], now, dst[:h.iw]) {
		copy(dst[h.iw:], src[f.iw:])
	}
}

// HalfWords reports false: ids and times need whole words.
func (h *held) HalfWords() bool { return false }

// hold returns the words of hold i.
func (h *held) hold(s []int64, i int64) []int64 {
	o := int64(h.iw) + 1 + holdWords*i
	return s[o : o+holdWords : o+holdWords]
}

// n returns the number of holds of s, zeroing a hold region no held could
// have written.
func (h *held) n(s []int64) int64 {
	n := s[h.iw]
	if n < 0 || n > h.holds {
		clear(s[h.iw:])
		return 0
	}
	return n
}

// drop removes hold i, moving the last into its place.
func (h *held) drop(s []int64, i int64) {
	last := s[h.iw] - 1
	copy(h.hold(s, i), h.hold(s, last))
	clear(h.hold(s, last))
	s[h.iw] = last
}

// expire records every hold whose expiry is at or before now in full, at
// now, and drops it.
func (h *held) expire(s []int64, now int64) {
	in := s[:h.iw:h.iw]
	for i := int64(0); i < h.n(s); {
		w := h.hold(s, i)
		if w[2] <= now {
			if w[3] > 0 {
				h.in.Record(in, now, w[3])
			}
			h.drop(s, i)
			continue
		}
		i++
	}
}

// sums returns the units held by all holds of s but skip (-1: none), the
// holders' targets but skip's, and the earliest expiry.
func (h *held) sums(s []int64, skip int64) (units, targets, first int64) {
	for i := range h.n(s) {
		w := h.hold(s, i)
		if i != skip {
			units = addSat(units, w[3])
			targets = addSat(targets, w[4])
		}
		if first == 0 || w[2] < first {
			first = w[2]
		}
	}
	return units, targets, first
}

// find returns the index of the hold of id, or -1.
func (h *held) find(s []int64, id lease.ID) int64 {
	for i := range h.n(s) {
		if w := h.hold(s, i); w[0] == id.Hi && w[1] == id.Lo {
			return i
		}
	}
	return -1
}

// decide decides cost on s with every held unit counted as taken.
func (h *held) decide(s []int64, now, cost int64, commit bool) Decision {
	in := s[:h.iw:h.iw]
	units, _, first := h.sums(s, -1)
	if units == 0 {
		if commit {
			return h.in.Decide(in, now, cost)
		}
		return h.in.Peek(in, now, cost)
	}
	if r := badCost(cost, h.limit); r != "" {
		d := h.in.Peek(in, now, 1)
		return Decision{Limit: h.limit, Remaining: nonNeg(h.remaining(d) - units), ResetAfter: d.ResetAfter, Reason: r}
	}
	if cost+units > h.limit {
		d := h.in.Peek(in, now, 1)
		return Decision{Limit: h.limit, Remaining: nonNeg(h.remaining(d) - units), ResetAfter: d.ResetAfter,
			RetryAfter: time.Duration(max(first-clampTime(now), 1)), Reason: ReasonOverLimit}
	}
	d := h.in.Peek(in, now, cost+units)
	if !d.Allowed {
		d.Remaining = nonNeg(d.Remaining - units)
		return d
	}
	if commit {
		d = h.in.Decide(in, now, cost)
		d.Remaining = nonNeg(d.Remaining - units)
	}
	return d
}

// look describes the key at now without deciding anything: an allowed
// decision whose Remaining is what is left, held units counted as taken.
func (h *held) look(s []int64, now int64) Decision {
	d := h.decide(s, now, 1, false)
	d.Remaining = h.remaining(d)
	d.Allowed, d.Reason, d.RetryAfter = true, "", 0
	return d
}

// remaining returns the units the inner algorithm has left before a peek
// of 1 unit that gave d.
func (h *held) remaining(d Decision) int64 {
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// Decide decides cost with every held unit counted as taken and, if
// allowed, records it. Holds expired by now are recorded only with an
// allowed cost: a rejected decision leaves s as it was, as a store that
// writes back only what it allowed (Redis) leaves it, so that the next
// operation records them, at its own time, on every store alike.
func (h *held) Decide(s []int64, now, cost int64) Decision {
	s = s[:h.words:h.words]
	if !h.expired(s, now) {
		return h.decide(s, now, cost, true)
	}
	p, _ := h.scratch.Get().(*[]int64)
	if p == nil {
		b := make([]int64, h.words)
		p = &b
	}
	cp := *p
	copy(cp, s)
	h.expire(cp, now)
	d := h.decide(cp, now, cost, true)
	if d.Allowed {
		copy(s, cp)
	}
	h.scratch.Put(p)
	return d
}

// expired reports whether a hold of s expires at or before now.
func (h *held) expired(s []int64, now int64) bool {
	for i := range h.n(s) {
		if h.hold(s, i)[2] <= now {
			return true
		}
	}
	return false
}

// Peek is Decide without changing s (an expired hold still counts, as it
// would once recorded).
func (h *held) Peek(s []int64, now, cost int64) Decision {
	s = s[:h.words:h.words]
	h.n(s)
	return h.decide(s, now, cost, false)
}

// Record records cost units at now, as the inner algorithm does.
func (h *held) Record(s []int64, now, cost int64) {
	s = s[:h.words:h.words]
	h.expire(s, now)
	h.in.Record(s[:h.iw:h.iw], now, cost)
}

// Release does nothing: window algorithms hold no units.
func (h *held) Release(s []int64, now, cost int64) {}

// UsedWords returns how many leading words of s may be nonzero.
func (h *held) UsedWords(s []int64) int {
	n := s[h.iw]
	if n < 0 || n > h.holds {
		return len(s)
	}
	if n > 0 {
		return h.iw + 1 + holdWords*int(n)
	}
	if u, ok := h.in.(interface{ UsedWords([]int64) int }); ok {
		return u.UsedWords(s[:h.iw])
	}
	return h.iw
}

// Hold applies op at now, deciding cost units as Decide would (0: none):
// it records op.Spent, decides cost, then tops the lease up towards
// op.Target, by at most half of what is left free, in proportion to
// op.Target among every holder's target. It returns the decision on cost
// (with no cost, an allowed one describing the key; a repeat repeats
// whether its cost was allowed) and what the lease holds. An invalid id or
// a negative field is rejected as a bad cost and changes nothing. Stores
// find it with a type assertion: an algorithm New built with Config.Holds
// has it.
func (h *held) Hold(s []int64, now, cost int64, op lease.Op) (Decision, lease.Held) {
	s = s[:h.words:h.words]
	if !op.ID.Valid() || op.Seq < 1 || op.Seq > lease.MaxSeq || op.Spent < 0 || op.Target < 0 || cost < 0 {
		return Decision{Limit: h.limit, Reason: ReasonBadCost}, lease.Held{}
	}
	h.expire(s, now)
	in := s[:h.iw:h.iw]
	now = clampTime(now)
	i := h.find(s, op.ID)
	if i >= 0 {
		w := h.hold(s, i)
		if op.Seq <= w[5]/2 {
			d := h.look(s, now)
			if cost > 0 && w[5]%2 == 0 {
				d.Allowed, d.Reason = false, ReasonOverLimit
			}
			return d, lease.Held{Units: w[3], TTL: time.Duration(w[2] - now), Repeat: true}
		}
		if op.Spent > 0 {
			// Spent units are counted, all of them (a holder that spent
			// more than it held, under a fallback of its own, spent them
			// all the same), and leave the hold.
			h.in.Record(in, now, min(op.Spent, h.limit))
			w[3] -= min(op.Spent, w[3])
		}
		if op.Target == 0 {
			h.drop(s, i)
			i = -1
		}
	}
	d := h.look(s, now)
	if cost > 0 {
		d = h.decide(s, now, cost, true)
	}
	if op.Target == 0 {
		return d, lease.Held{}
	}
	target := min(op.Target, h.limit)
	own := int64(0)
	if i >= 0 {
		own = h.hold(s, i)[3]
	}
	_, targets, _ := h.sums(s, i)
	free := d.Remaining // L - S - every held unit, after the cost
	if !d.Allowed {
		free = 0
	}
	add := int64(0)
	if want := target - own; want > 0 && free > 1 {
		share := mulDiv(free, target, 2*addSat(target, targets))
		add = min(want, share)
	}
	if i < 0 {
		if add == 0 || h.n(s) >= h.holds {
			return d, lease.Held{}
		}
		i = s[h.iw]
		s[h.iw]++
		w := h.hold(s, i)
		w[0], w[1] = op.ID.Hi, op.ID.Lo
	}
	w := h.hold(s, i)
	w[2], w[3], w[4] = now+h.ttl, w[3]+add, target
	w[5] = 2 * op.Seq
	if d.Allowed && cost > 0 {
		w[5]++
	}
	d.Remaining = nonNeg(d.Remaining - add)
	return d, lease.Held{Units: w[3], Granted: add, TTL: time.Duration(h.ttl)}
}
