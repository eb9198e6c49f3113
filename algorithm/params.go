package algorithm

import (
	"fmt"
	"time"
)

// Params is the parameter form of one of this package's algorithms: its
// Config reduced to the numbers its decisions use, derived values included,
// and the shape of its state. It is what a store that runs the algorithm
// elsewhere (the Redis script of package redisstore) consumes, so that no
// store has to recover an algorithm's private parameters. Params is
// comparable, so stores may key tables by it.
type Params struct {
	// Name is the algorithm's name, one of Names.
	Name string
	// Limit is what Decision.Limit reports: the units per Window (for GCRA
	// the rate's units per Window, for the token bucket its capacity).
	Limit int64
	// Window is the period Limit applies to; 0 for a concurrency limit
	// without a leak guard.
	Window time.Duration
	// Capacity is the most units accepted at once: the token bucket's
	// capacity, GCRA's burst. Zero for the other algorithms.
	Capacity int64
	// Interval is the emission interval, the time one unit takes to refill
	// or leak (token-bucket, gcra, leaky-bucket), rounded up to a whole
	// nanosecond. Zero for the others.
	Interval time.Duration
	// MaxDelay is the leaky bucket's longest queueing delay.
	MaxDelay time.Duration
	// Slices is the sliding window's number of slices of Window/Slices.
	Slices int
	// EntryUnits is bounded-log's m = max(1, floor(e*Limit)): the units an
	// entry holds. Entries is its capacity in entries.
	EntryUnits, Entries int64
	// LeaseTTL is how long a concurrency lease lasts when not released
	// (Window, or DefaultLeaseTTL without one), and MaxLeases the most
	// leases a key holds at once. Zero for the other algorithms.
	LeaseTTL  time.Duration
	MaxLeases int64
	// Words is Algorithm.Words: the length of the state.
	Words int
	// IdleAfter is Algorithm.IdleAfter.
	IdleAfter time.Duration
}

// ParamsOf returns the parameter form of a, and false if a is not one of
// this package's algorithms (built by New).
func ParamsOf(a Algorithm) (Params, bool) {
	p, ok := a.(interface{ Params() Params })
	if !ok {
		return Params{}, false
	}
	return p.Params(), true
}

// Params returns the algorithm's parameter form.
func (b *base) Params() Params { return b.p }

// withParams fills in b's parameter form from its Config and the
// algorithm-specific fields already set in p.
func (b *base) withParams(p Params) {
	p.Name, p.Window, p.Words, p.IdleAfter = b.cfg.Algorithm, b.cfg.Window, b.words, b.idle
	if p.Limit == 0 {
		p.Limit = b.cfg.Limit
	}
	b.p = p
}

// ScriptArgs returns the integer parameters the Redis script of package
// redisstore takes for this algorithm, with every duration in units of
// unit (the script counts time in microseconds). A window or delay that is
// not a whole number of units is an error; an emission interval is rounded
// up to the next whole unit, which only makes the bucket slower. The order,
// per algorithm:
//
//	fixed-window, weighted-window, sliding-log: Limit, Window
//	concurrency: Limit, Window, MaxLeases, LeaseTTL
//	sliding-window: Limit, Window/Slices, Slices
//	token-bucket, gcra: Limit, Capacity, Interval, Capacity*Interval
//	leaky-bucket: Limit, Interval, MaxDelay
//	bounded-log: Limit, Window, EntryUnits, Entries
func (p Params) ScriptArgs(unit time.Duration) ([]int64, error) {
	whole := func(what string, d time.Duration) (int64, error) {
		if d%unit != 0 {
			return 0, fmt.Errorf("%s: %s %v is not a whole number of %v", p.Name, what, d, unit)
		}
		return int64(d / unit), nil
	}
	w, err := whole("window", p.Window)
	if err != nil {
		return nil, err
	}
	iv := int64((p.Interval + unit - 1) / unit)
	switch p.Name {
	case FixedWindow, WeightedWindow, SlidingLog:
		return []int64{p.Limit, w}, nil
	case Concurrency:
		ttl, err := whole("lease TTL", p.LeaseTTL)
		if err != nil {
			return nil, err
		}
		return []int64{p.Limit, w, p.MaxLeases, ttl}, nil
	case SlidingWindow:
		slice, err := whole("slice", p.Window/time.Duration(p.Slices))
		if err != nil || p.Window%time.Duration(p.Slices) != 0 {
			return nil, fmt.Errorf("%s: window %v does not split into %d slices of whole %v", p.Name, p.Window, p.Slices, unit)
		}
		return []int64{p.Limit, slice, int64(p.Slices)}, nil
	case TokenBucket, GCRA:
		return []int64{p.Limit, p.Capacity, iv, p.Capacity * iv}, nil
	case LeakyBucket:
		md, err := whole("max delay", p.MaxDelay)
		if err != nil {
			return nil, err
		}
		return []int64{p.Limit, iv, md}, nil
	case BoundedLog:
		return []int64{p.Limit, w, p.EntryUnits, p.Entries}, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknown, p.Name)
}

// TimeWord reports whether word i of the algorithm's state holds a time or
// a duration in nanoseconds (so a store that keeps times in other units
// converts it); the other words hold counts, indexes or packed fields. The
// sliding window's counts are packed into fields (see slidingWindow).
func (p Params) TimeWord(i int) bool {
	switch p.Name {
	case TokenBucket, GCRA, LeakyBucket:
		return true
	case Concurrency:
		// The last change, and each lease's expiry.
		return i == 1 || (i >= ccHeader && (i-ccHeader)%ccLease == 2)
	case SlidingLog:
		return i >= 2
	case BoundedLog:
		// The newest timestamp, the first timestamps and the gaps.
		e := int(p.Entries)
		return i == 1 || (i >= 2 && i < 2+e) || i >= 2+2*e
	}
	return false
}
