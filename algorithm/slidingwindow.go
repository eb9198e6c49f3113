package algorithm

import (
	"math"
	"time"
)

// slidingWindow counts units in N slices of Window/N each and counts the
// current slice and the N-1 before it, as seed 000's sliding window counter
// does. The counted span is therefore between (N-1)/N of Window and Window.
//
// State: [0] the number of the newest slice (time/slice), then the N slice
// counts packed two uint32 to a word, slice number z at ring position z%N.
type slidingWindow struct {
	base
	limit  int64
	slice  int64 // nanoseconds per slice
	slices int64
}

func newSlidingWindow(c Config) *slidingWindow {
	return &slidingWindow{
		base:   base{cfg: c, words: 1 + (c.Slices+1)/2, idle: c.Window},
		limit:  c.Limit,
		slice:  int64(c.Window) / int64(c.Slices),
		slices: int64(c.Slices),
	}
}

// count returns the count of slice number z.
func (a *slidingWindow) count(s []int64, z int64) int64 {
	return countAt(s, z%a.slices)
}

// countAt returns the count at ring position p.
func countAt(s []int64, p int64) int64 {
	return int64(uint32(uint64(s[1+p>>1]) >> (32 * (p & 1))))
}

// set sets the count of slice number z to v (at most MaxUint32).
func (a *slidingWindow) set(s []int64, z, v int64) {
	p := z % a.slices
	sh := 32 * (p % 2)
	w := uint64(s[1+p/2])&^(math.MaxUint32<<sh) | uint64(min(v, math.MaxUint32))<<sh
	s[1+p/2] = int64(w)
}

// view returns the slice now falls in (never before the newest one in s),
// now moved forward to it if the clock went back, the oldest slice counted,
// and the total counted.
func (a *slidingWindow) view(s []int64, now int64) (k, t, oldest, total int64) {
	now = clampTime(now)
	k = now / a.slice
	if k < s[0] {
		k, now = s[0], s[0]*a.slice
	}
	oldest = max(k-a.slices+1, 0)
	if k-s[0] >= a.slices {
		return k, now, oldest, 0
	}
	// Sum every slot, then take out the slices the gap since s[0] expired.
	for _, w := range s[1:] {
		total += int64(uint32(w)) + int64(uint64(w)>>32)
	}
	for z := max(s[0]-a.slices+1, 0); z < oldest; z++ {
		total -= a.count(s, z)
	}
	return k, now, oldest, total
}

// repair zeroes a state no slidingWindow could have written.
func (a *slidingWindow) repair(s []int64) {
	if s[0] < 0 || s[0] > MaxTime/a.slice {
		clear(s)
	}
}

func (a *slidingWindow) decide(s []int64, now, cost int64, commit bool) Decision {
	s = s[:a.words:a.words]
	a.repair(s)
	k, now, oldest, total := a.view(s, now)
	d := Decision{Limit: a.limit}
	if r := badCost(cost, a.limit); r != "" {
		d.Remaining, d.Reason = nonNeg(a.limit-total), r
		d.ResetAfter = a.resetAfter(s, now, oldest, s[0])
		return d
	}
	if total+cost > a.limit {
		// Slice z stops counting when slice z+N begins.
		need, z, p := total+cost-a.limit, oldest, oldest%a.slices
		for ; z < s[0]; z++ {
			need -= countAt(s, p)
			if need <= 0 {
				break
			}
			if p++; p == a.slices {
				p = 0
			}
		}
		d.Remaining, d.Reason = nonNeg(a.limit-total), ReasonOverLimit
		d.RetryAfter = time.Duration((z+a.slices)*a.slice - now)
		d.ResetAfter = a.resetAfter(s, now, oldest, s[0])
		return d
	}
	if commit {
		a.advance(s, k)
		a.set(s, k, a.count(s, k)+cost)
	}
	d.Allowed, d.Remaining = true, a.limit-total-cost
	d.ResetAfter = time.Duration((k+a.slices)*a.slice - now)
	return d
}

// resetAfter returns how long until the newest non-empty slice among
// oldest..newest stops counting.
func (a *slidingWindow) resetAfter(s []int64, now, oldest, newest int64) time.Duration {
	p := newest % a.slices
	for z := newest; z >= oldest; z-- {
		if countAt(s, p) > 0 {
			return time.Duration((z+a.slices)*a.slice - now)
		}
		if p--; p < 0 {
			p = a.slices - 1
		}
	}
	return 0
}

// advance makes slice k the newest, emptying the slices it passes.
func (a *slidingWindow) advance(s []int64, k int64) {
	if k <= s[0] {
		return
	}
	for z := max(s[0]+1, k-a.slices+1); z <= k; z++ {
		a.set(s, z, 0)
	}
	s[0] = k
}

// Decide decides and, if allowed, records the request.
func (a *slidingWindow) Decide(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, true)
}

// Peek is Decide without changing the state.
func (a *slidingWindow) Peek(s []int64, now, cost int64) Decision {
	return a.decide(s, now, cost, false)
}

// Record adds cost to the slice now falls in, if that slice still counts.
func (a *slidingWindow) Record(s []int64, now, cost int64) {
	s = s[:a.words:a.words]
	if cost < 1 {
		return
	}
	a.repair(s)
	z := clampTime(now) / a.slice
	if z <= s[0]-a.slices {
		return
	}
	a.advance(s, z)
	a.set(s, z, a.count(s, z)+min(cost, MaxLimit))
}
