package algorithm

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Property tests: random bursty traffic with random costs and gaps, many
// seeds, every documented bound checked on the accepted requests.

const propertySeeds = 60

// event is one request of a generated trace.
type event struct{ t, cost int64 }

// traffic returns n requests with bursts, pauses and occasional long gaps,
// costs in [1, maxCost].
func traffic(rng *rand.Rand, n int, window, maxCost int64) []event {
	ev := make([]event, 0, n)
	t := rng.Int64N(window)
	for len(ev) < n {
		switch r := rng.IntN(100); {
		case r < 60: // inside a burst
			t += rng.Int64N(window/200 + 1)
		case r < 90:
			t += rng.Int64N(window / 10)
		case r < 98:
			t += rng.Int64N(window)
		default:
			t += rng.Int64N(5 * window)
		}
		cost := int64(1)
		if rng.IntN(3) == 0 {
			cost = 1 + rng.Int64N(maxCost)
		}
		ev = append(ev, event{t, cost})
	}
	return ev
}

// windowSum returns the units accepted in (t-window, t] given accepted
// events in time order.
func windowSum(acc []event, t, window int64) int64 {
	sum := int64(0)
	for i := len(acc) - 1; i >= 0 && acc[i].t > t-window; i-- {
		sum += acc[i].cost
	}
	return sum
}

// busiestUnits returns the most units accepted inside any window-long
// interval (t-window, t] of events in time order.
func busiestUnits(acc []event, window int64) int64 {
	peak, sum := int64(0), int64(0)
	for i, j := 0, 0; i < len(acc); i++ {
		sum += acc[i].cost
		for acc[i].t-acc[j].t >= window {
			sum -= acc[j].cost
			j++
		}
		peak = max(peak, sum)
	}
	return peak
}

// randomConfig returns a configuration of alg with random limit and window.
func randomConfig(rng *rand.Rand, alg Name) Config {
	c := Config{
		Algorithm: alg,
		Limit:     1 + rng.Int64N(150),
		Window:    time.Duration(1+rng.Int64N(60)) * 100 * time.Millisecond,
	}
	switch alg {
	case BoundedLog:
		c.Tolerance = []float64{0.01, 0.05, 0.1, 0.3, 1}[rng.IntN(5)]
	case SlidingWindow:
		c.Slices = 1 + rng.IntN(20)
	case TokenBucket:
		c.Capacity = 1 + rng.Int64N(c.Limit)
		c.Rate = float64(1+rng.IntN(100)) / 3
	case GCRA:
		c.Burst = 1 + rng.Int64N(10)
	case LeakyBucket:
		c.MaxDelay = time.Duration(rng.Int64N(int64(c.Window)))
	}
	return c
}

// run decides every event and returns the accepted ones. On the way it checks
// what every decision must keep: no negative fields, Peek equal to Decide and
// leaving the state alone, and an exact RetryAfter and Remaining.
func run(t *testing.T, a Algorithm, ev []event, check func(acc []event, e event, d Decision)) []event {
	t.Helper()
	s := make([]int64, a.Words())
	before := make([]int64, len(s))
	var acc []event
	for i, e := range ev {
		copy(before, s)
		p := a.Peek(s, e.t, e.cost)
		if !equal(s, before) {
			t.Fatalf("%s: Peek changed the state", a.Name())
		}
		d := a.Decide(s, e.t, e.cost)
		if d != p {
			t.Fatalf("%s: Peek %+v, Decide %+v", a.Name(), p, d)
		}
		checkDecision(t, a, d, e.cost)
		if !d.Allowed && !equal(s, before) {
			t.Fatalf("%s: a rejection changed the state", a.Name())
		}
		if i%7 == 0 {
			checkRetry(t, a, s, e, d)
			checkRemaining(t, a, s, e, d)
		}
		if check != nil {
			check(acc, e, d)
		}
		if d.Allowed {
			acc = append(acc, event{e.t + int64(d.Delay), e.cost})
		}
	}
	return acc
}

func equal(a, b []int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkRetry checks that a rejected request is still rejected just before
// RetryAfter and accepted at it.
func checkRetry(t *testing.T, a Algorithm, s []int64, e event, d Decision) {
	t.Helper()
	if d.Allowed || d.Reason != ReasonOverLimit && d.Reason != ReasonQueueFull {
		return
	}
	if a.Name() == Concurrency && a.Config().Window == 0 {
		return
	}
	if d.RetryAfter <= 0 {
		t.Fatalf("%s: rejected with RetryAfter %v: %+v", a.Name(), d.RetryAfter, d)
	}
	at := e.t + int64(d.RetryAfter)
	if early := a.Peek(s, at-1, e.cost); early.Allowed {
		t.Fatalf("%s: %+v: accepted 1ns before RetryAfter: %+v", a.Name(), d, early)
	}
	if on := a.Peek(s, at, e.cost); !on.Allowed {
		t.Fatalf("%s: %+v: still rejected at RetryAfter: %+v", a.Name(), d, on)
	}
}

// checkRemaining checks that Remaining more units of cost 1 are accepted at
// the same time, and not one more.
func checkRemaining(t *testing.T, a Algorithm, s []int64, e event, d Decision) {
	t.Helper()
	if d.Reason == ReasonBadCost || d.Reason == ReasonCostOverLimit {
		return
	}
	c := make([]int64, len(s))
	copy(c, s)
	for i := int64(0); i < d.Remaining; i++ {
		if !a.Decide(c, e.t, 1).Allowed {
			t.Fatalf("%s: %+v: request %d of the remaining rejected", a.Name(), d, i+1)
		}
	}
	if a.Name() == LeakyBucket && d.Remaining == a.Config().Limit {
		return // remaining is capped at the limit
	}
	if x := a.Decide(c, e.t, 1); x.Allowed {
		t.Fatalf("%s: %+v: one more than remaining accepted", a.Name(), d)
	}
}

// forEachSeed runs f for propertySeeds random configurations of alg.
func forEachSeed(t *testing.T, alg Name, f func(t *testing.T, rng *rand.Rand, a Algorithm)) {
	for seed := range uint64(propertySeeds) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		a := mustNew(t, randomConfig(rng, alg))
		f(t, rng, a)
		if t.Failed() {
			t.Fatalf("seed %d, config %+v", seed, a.Config())
		}
	}
}

func TestPropertyBoundedLog(t *testing.T) {
	forEachSeed(t, BoundedLog, func(t *testing.T, rng *rand.Rand, a Algorithm) {
		c := a.Config()
		l, w := c.Limit, int64(c.Window)
		m, _ := boundedLogSize(l, c.Tolerance)
		maxEntries := (l-1)/m + 2
		s := make([]int64, a.Words())
		acc := run(t, a, traffic(rng, 1500, w, l), func(acc []event, e event, d Decision) {
			// Promise 2 on any traffic: a rejection means the trailing
			// window really was full.
			if !d.Allowed && d.Reason == ReasonOverLimit && windowSum(acc, e.t, w)+e.cost <= l {
				t.Fatalf("rejected %+v although the trailing window holds %d of %d", e, windowSum(acc, e.t, w), l)
			}
			if d.Allowed {
				a.Decide(s, e.t, e.cost)
				if n := s[0] & blNMask; n > maxEntries {
					t.Fatalf("%d entries, bound %d", n, maxEntries)
				}
			}
		})
		// Promise 1.
		if got, bound := busiestUnits(acc, w), l+m; got > bound || float64(got) > (1+c.Tolerance)*float64(l) {
			t.Fatalf("busiest window %d, bound L+m = %d", got, bound)
		}
	})
}

// compliant returns traffic that never has more than limit units in any
// window-long interval.
func compliant(rng *rand.Rand, n int, window, limit int64) []event {
	var out []event
	for _, e := range traffic(rng, 3*n, window, limit) {
		if windowSum(out, e.t, window)+e.cost <= limit {
			out = append(out, e)
		}
		if len(out) == n {
			break
		}
	}
	return out
}

func TestPropertyNoFalseRejects(t *testing.T) {
	for _, alg := range []Name{BoundedLog, SlidingLog} {
		forEachSeed(t, alg, func(t *testing.T, rng *rand.Rand, a Algorithm) {
			c := a.Config()
			ev := compliant(rng, 800, int64(c.Window), c.Limit)
			if acc := run(t, a, ev, nil); len(acc) != len(ev) {
				t.Fatalf("%s: %d of %d compliant requests rejected", alg, len(ev)-len(acc), len(ev))
			}
		})
	}
}

func TestPropertySlidingLog(t *testing.T) {
	forEachSeed(t, SlidingLog, func(t *testing.T, rng *rand.Rand, a Algorithm) {
		l, w := a.Config().Limit, int64(a.Config().Window)
		acc := run(t, a, traffic(rng, 1500, w, l), func(acc []event, e event, d Decision) {
			if !d.Allowed && d.Reason == ReasonOverLimit && windowSum(acc, e.t, w)+e.cost <= l {
				t.Fatalf("rejected %+v although the trailing window holds %d of %d", e, windowSum(acc, e.t, w), l)
			}
		})
		if got := busiestUnits(acc, w); got > l {
			t.Fatalf("busiest window %d > limit %d", got, l)
		}
	})
}

// TestPropertyWindowBounds checks the 2L bound of the three window counters.
func TestPropertyWindowBounds(t *testing.T) {
	for _, alg := range []Name{FixedWindow, SlidingWindow, WeightedWindow} {
		forEachSeed(t, alg, func(t *testing.T, rng *rand.Rand, a Algorithm) {
			l, w := a.Config().Limit, int64(a.Config().Window)
			acc := run(t, a, traffic(rng, 1500, w, l), nil)
			if got := busiestUnits(acc, w); got > 2*l {
				t.Fatalf("%s: busiest window %d > 2L = %d", alg, got, 2*l)
			}
		})
	}
}

func TestPropertyTokenBucket(t *testing.T) {
	forEachSeed(t, TokenBucket, func(t *testing.T, rng *rand.Rand, a Algorithm) {
		c := a.Config()
		w := int64(c.Window)
		acc := run(t, a, traffic(rng, 1500, w, c.Capacity), nil)
		if got, bound := busiestUnits(acc, w), float64(c.Capacity)+c.Rate*c.Window.Seconds(); float64(got) > bound {
			t.Fatalf("busiest window %d > C + rate·W = %v", got, bound)
		}
	})
}

// TestPropertySpacing checks GCRA's and the leaky bucket's spacing: for
// GCRA an interval of length d holds at most burst + d/T units; for the
// leaky bucket, whose requests leave at their Delay, the requests before the
// last one leaving within d hold at most d/T units.
func TestPropertySpacing(t *testing.T) {
	for _, alg := range []Name{GCRA, LeakyBucket} {
		forEachSeed(t, alg, func(t *testing.T, rng *rand.Rand, a Algorithm) {
			c := a.Config()
			interval, burst := ceilDiv(int64(c.Window), c.Limit), c.Burst
			acc := run(t, a, traffic(rng, 1500, int64(c.Window), max(burst, 1)), func(acc []event, e event, d Decision) {
				if d.Delay > c.MaxDelay {
					t.Fatalf("delay %v above max %v", d.Delay, c.MaxDelay)
				}
			})
			for i := range acc {
				units := int64(0)
				for j := i; j < len(acc); j++ {
					units += acc[j].cost
					// GCRA: the units arriving within span take at most
					// span + burst·T of theoretical time. Leaky bucket: the
					// requests before j all left within span.
					span, n := acc[j].t-acc[i].t, units-burst
					if alg == LeakyBucket {
						n = units - acc[j].cost
					}
					if n > span/interval {
						t.Fatalf("%s: %d units start within %v, burst %d, interval %v", alg, units, time.Duration(span), burst, time.Duration(interval))
					}
				}
			}
		})
	}
}

// TestPropertyConcurrency holds random requests for random durations and
// checks that the in-flight count never exceeds the limit.
func TestPropertyConcurrency(t *testing.T) {
	for seed := range uint64(propertySeeds) {
		rng := rand.New(rand.NewPCG(seed, 7))
		l := 1 + rng.Int64N(20)
		a := mustNew(t, Config{Algorithm: Concurrency, Limit: l})
		s := make([]int64, a.Words())
		type held struct{ until, cost int64 }
		var flying []held
		inFlight, now := int64(0), int64(0)
		for range 2000 {
			now += rng.Int64N(int64(time.Millisecond))
			// Release what has finished.
			kept := flying[:0]
			for _, h := range flying {
				if h.until <= now {
					a.Release(s, now, h.cost)
					inFlight -= h.cost
				} else {
					kept = append(kept, h)
				}
			}
			flying = kept
			cost := 1 + rng.Int64N(l)
			d := a.Decide(s, now, cost)
			if d.Allowed != (inFlight+cost <= l) {
				t.Fatalf("seed %d: %d in flight of %d, cost %d: %+v", seed, inFlight, l, cost, d)
			}
			if d.Allowed {
				inFlight += cost
				flying = append(flying, held{now + rng.Int64N(int64(10*time.Millisecond)), cost})
				if d.Remaining != l-inFlight {
					t.Fatalf("seed %d: remaining %d, want %d", seed, d.Remaining, l-inFlight)
				}
			}
		}
	}
}

// TestConcurrencyLeakGuard checks that slots never released come back after
// the Window, and not before.
func TestConcurrencyLeakGuard(t *testing.T) {
	a := mustNew(t, Config{Algorithm: Concurrency, Limit: 2, Window: time.Second})
	s := make([]int64, a.Words())
	a.Decide(s, 0, 2)
	d := a.Decide(s, int64(500*time.Millisecond), 1)
	if d.Allowed || d.RetryAfter != 500*time.Millisecond+1 {
		t.Fatalf("full: %+v, want a rejection with RetryAfter 500ms+1ns", d)
	}
	if d := a.Peek(s, int64(time.Second), 1); d.Allowed {
		t.Fatalf("leak guard fired at exactly Window: %+v", d)
	}
	if d := a.Peek(s, int64(time.Second)+1, 2); !d.Allowed {
		t.Fatalf("leaked slots not back after Window: %+v", d)
	}
	a.Release(s, 0, 5) // more than held, and from the past
	if s[0] != 0 {
		t.Fatalf("release below zero: %v", s)
	}
}
