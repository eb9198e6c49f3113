package algorithm

import "time"

// Params is the parameter form of one of this package's algorithms: its
// Config reduced to the numbers its decisions use, derived values included,
// and the shape of its state. It is what a store that runs the algorithm
// elsewhere (the Redis script of package redisstore) consumes, so that no
// store has to recover an algorithm's private parameters. Every algorithm
// New returns has a method
//
//	Params() Params
//
// which a store finds with a type assertion. Params is comparable, so
// stores may key tables by it.
type Params struct {
	// Name is the algorithm's name, one of Names.
	Name Name
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
	// (Window, or lease.DefaultTTL without one), and MaxLeases the most
	// leases a key holds at once (at most lease.MaxPerKey). Zero for the other algorithms.
	LeaseTTL  time.Duration
	MaxLeases int64
	// Calendar is a calendar window's period (the zero Calendar for the
	// others); Window is then zero, and the algorithm's Bounds method gives
	// the periods' boundaries. CarryOver is its carry-over cap.
	Calendar  Calendar
	CarryOver int64
	// Holds is the most holds a key keeps (Config.Holds) and HoldTTL how
	// long one lasts unless renewed; zero for an algorithm without holds.
	// Its state is then the algorithm's own words, the number of holds and
	// that many holds (see held.Hold).
	Holds   int64
	HoldTTL time.Duration
	// Words is Algorithm.Words: the length of the state.
	Words int
	// IdleAfter is Algorithm.IdleAfter.
	IdleAfter time.Duration
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

// TimeWord reports whether word i of the algorithm's state holds a time or
// a duration in nanoseconds (so a store that keeps times in other units
// converts it); the other words hold counts, indexes or packed fields. The
// sliding window's counts are packed into fields (see slidingWindow).
func (p Params) TimeWord(i int) bool {
	if p.Holds > 0 {
		// The inner state, the number of holds, then each hold's id
		// halves, expiry, units, target and seq.
		iw := p.Words - 1 - holdWords*int(p.Holds)
		if i > iw {
			return (i-iw-1)%holdWords == 2
		}
		if i == iw {
			return false
		}
	}
	switch p.Name {
	case FixedWindow:
		return !p.Calendar.IsZero() && i == 0 // a calendar period's start
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
