package algorithm

import (
	"math/bits"
	"time"
)

// base carries what every algorithm has: its name, its checked Config, the
// length of its state and how long its state takes to go idle.
type base struct {
	cfg   Config
	words int
	idle  time.Duration
	p     Params
	self  Algorithm // the algorithm that embeds this base
}

// Name returns the algorithm's name.
func (b *base) Name() Name { return b.cfg.Algorithm }

// Config returns the checked parameters, defaults filled in.
func (b *base) Config() Config { return b.cfg }

// Words returns the state's length.
func (b *base) Words() int { return b.words }

// IdleAfter returns how long an untouched state takes to equal a zero one.
func (b *base) IdleAfter() time.Duration { return b.idle }

// Release does nothing: only the concurrency algorithm holds units.
func (b *base) Release(state []int64, now int64, cost int64) {}

// maxAhead bounds how far into the future a bucket's theoretical arrival
// time may be pushed by Record, so repeated merges cannot overflow.
const maxAhead = int64(4 * MaxWindow)

// maxCount bounds counters fed by Record.
const maxCount = int64(1) << 62

// clampTime maps now into [0, maxTime].
func clampTime(now int64) int64 {
	if now < 0 {
		return 0
	}
	if now > maxTime {
		return maxTime
	}
	return now
}

// badCost returns the rejection reason for a cost outside [1, max], or "".
func badCost(cost, max int64) Reason {
	if cost < 1 {
		return ReasonBadCost
	}
	if cost > max {
		return ReasonCostOverLimit
	}
	return ""
}

// nonNeg returns x, or 0 if x is negative.
func nonNeg(x int64) int64 {
	if x < 0 {
		return 0
	}
	return x
}

// addSat returns a+b for non-negative a and b, saturated at maxCount.
func addSat(a, b int64) int64 {
	if a > maxCount-b {
		return maxCount
	}
	return a + b
}

// mulDiv returns floor(a*b/c) for non-negative a, b and positive c, where
// the true quotient fits in int64; the product may not.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// mulDivUp is mulDiv rounded up.
func mulDivUp(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}

// setSelf records the algorithm that embeds b, for its ConvertFrom.
func (b *base) setSelf(a Algorithm) { b.self = a }
