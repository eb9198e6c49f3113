package algorithm

import (
	"fmt"
	"math"
)

// newAlgorithm builds the algorithm c names; c.Limit >= 1 and, except for
// concurrency, c.Window > 0 are already checked. It checks the rest against
// the exported bounds and fills in defaults.
func newAlgorithm(c Config) (Algorithm, error) {
	if c.Limit > MaxLimit {
		return nil, fmt.Errorf("%s: limit %d is above the maximum %d", c.Algorithm, c.Limit, int64(MaxLimit))
	}
	if c.Window < 0 {
		return nil, fmt.Errorf("%s: window must not be negative, got %v", c.Algorithm, c.Window)
	}
	if c.Window > MaxWindow {
		return nil, fmt.Errorf("%s: window %v is longer than the maximum %v", c.Algorithm, c.Window, MaxWindow)
	}
	switch c.Algorithm {
	case FixedWindow:
		return newFixedWindow(c), nil
	case SlidingWindow:
		return checkedSlidingWindow(c)
	case WeightedWindow:
		return newWeightedWindow(c), nil
	case SlidingLog:
		if c.Limit > maxLogSize {
			return nil, fmt.Errorf("%s: limit %d is above %d (it keeps one timestamp per unit); use bounded-log",
				c.Algorithm, c.Limit, maxLogSize)
		}
		return newSlidingLog(c), nil
	case LeakyBucket:
		return checkedLeakyBucket(c)
	case Concurrency:
		return newConcurrency(c), nil
	case TokenBucket:
		return checkedTokenBucket(c)
	case GCRA:
		return checkedGCRA(c)
	case BoundedLog:
		return checkedBoundedLog(c)
	default:
		return nil, fmt.Errorf("%w %q: want one of %v", ErrUnknown, c.Algorithm, Names())
	}
}

// checkedSlidingWindow checks and defaults c.Slices (12).
func checkedSlidingWindow(c Config) (Algorithm, error) {
	if c.Slices == 0 {
		c.Slices = 12
	}
	if c.Slices < 1 || c.Slices > maxSlices {
		return nil, fmt.Errorf("%s: slices must be between 1 and %d, got %d", c.Algorithm, maxSlices, c.Slices)
	}
	if int64(c.Window) < int64(c.Slices) {
		return nil, fmt.Errorf("%s: window %v is too short for %d slices", c.Algorithm, c.Window, c.Slices)
	}
	return newSlidingWindow(c), nil
}

// checkedLeakyBucket checks and defaults c.MaxDelay (the window) and c.Rate.
func checkedLeakyBucket(c Config) (Algorithm, error) {
	if c.MaxDelay < 0 || c.MaxDelay > MaxWindow {
		return nil, fmt.Errorf("%s: max delay must be between 0 and %v, got %v", c.Algorithm, MaxWindow, c.MaxDelay)
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = c.Window
	}
	interval, err := emissionInterval(&c)
	if err != nil {
		return nil, err
	}
	if err := checkSpan(c.Algorithm, "limit × leak interval", c.Limit, interval); err != nil {
		return nil, err
	}
	return newLeakyBucket(c, interval), nil
}

// checkedTokenBucket checks and defaults c.Capacity (the limit) and c.Rate.
func checkedTokenBucket(c Config) (Algorithm, error) {
	if c.Capacity < 0 || c.Capacity > MaxLimit {
		return nil, fmt.Errorf("%s: capacity must be between 1 and %d, got %d", c.Algorithm, int64(MaxLimit), c.Capacity)
	}
	if c.Capacity == 0 {
		c.Capacity = c.Limit
	}
	interval, err := emissionInterval(&c)
	if err != nil {
		return nil, err
	}
	if err := checkSpan(c.Algorithm, "capacity × refill interval", c.Capacity, interval); err != nil {
		return nil, err
	}
	return newBucket(c, c.Capacity, c.Capacity, interval), nil
}

// checkedGCRA checks and defaults c.Burst (Limit).
func checkedGCRA(c Config) (Algorithm, error) {
	if c.Burst < 0 || c.Burst > MaxLimit {
		return nil, fmt.Errorf("%s: burst must be between 1 and %d, got %d", c.Algorithm, int64(MaxLimit), c.Burst)
	}
	if c.Burst == 0 {
		c.Burst = c.Limit
	}
	interval := ceilDiv(int64(c.Window), c.Limit)
	if err := checkSpan(c.Algorithm, "burst × emission interval", c.Burst, interval); err != nil {
		return nil, err
	}
	return newBucket(c, c.Limit, c.Burst, interval), nil
}

// checkedBoundedLog checks and defaults c.Tolerance (0.05).
func checkedBoundedLog(c Config) (Algorithm, error) {
	if math.IsNaN(c.Tolerance) || c.Tolerance < 0 || c.Tolerance > 1 {
		return nil, fmt.Errorf("%s: tolerance must be between 0 and 1, got %v", c.Algorithm, c.Tolerance)
	}
	if c.Tolerance == 0 {
		c.Tolerance = 0.05
	}
	if _, size := boundedLogSize(c.Limit, c.Tolerance); size > maxLogSize {
		return nil, fmt.Errorf("%s: limit %d with tolerance %v needs %d entries, more than %d; raise the tolerance",
			c.Algorithm, c.Limit, c.Tolerance, size, maxLogSize)
	}
	return newBoundedLog(c), nil
}

// emissionInterval returns the nanoseconds per unit of c.Rate, rounded up,
// defaulting c.Rate to Limit per Window.
func emissionInterval(c *Config) (int64, error) {
	if c.Rate == 0 {
		c.Rate = float64(c.Limit) / c.Window.Seconds()
		return ceilDiv(int64(c.Window), c.Limit), nil
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0 {
		return 0, fmt.Errorf("%s: rate must be a positive number of units per second, got %v", c.Algorithm, c.Rate)
	}
	if c.Rate > 1e9 {
		return 0, fmt.Errorf("%s: rate %v per second is out of range: at most 1e9", c.Algorithm, c.Rate)
	}
	ns := math.Ceil(1e9 / c.Rate)
	if ns > float64(2*MaxWindow) {
		return 0, fmt.Errorf("%s: rate %v per second is out of range: want between %v and 1e9",
			c.Algorithm, c.Rate, 1/(2*MaxWindow).Seconds())
	}
	return int64(ns), nil
}

// checkSpan checks that n units of interval nanoseconds each span at most
// twice MaxWindow.
func checkSpan(alg Name, what string, n, interval int64) error {
	if interval > int64(2*MaxWindow)/n {
		return fmt.Errorf("%s: %s is %.0fs, longer than the maximum %v",
			alg, what, float64(n)*float64(interval)/1e9, 2*MaxWindow)
	}
	return nil
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// newCalendar checks a calendar window's Config (c.Limit >= 1 is checked)
// and builds it.
func newCalendar(c Config) (Algorithm, error) {
	if c.Algorithm != FixedWindow {
		return nil, fmt.Errorf("%s: a calendar period is a fixed window by definition; use %s", c.Algorithm, FixedWindow)
	}
	if c.Calendar.IsZero() {
		return nil, fmt.Errorf("%s: carry-over needs a calendar period", c.Algorithm)
	}
	if c.Window != 0 {
		return nil, fmt.Errorf("%s: give a calendar period or a window, not both", c.Algorithm)
	}
	if c.Limit > MaxLimit {
		return nil, fmt.Errorf("%s: limit %d is above the maximum %d", c.Algorithm, c.Limit, int64(MaxLimit))
	}
	if c.CarryOver < 0 || c.CarryOver > MaxLimit-c.Limit {
		return nil, fmt.Errorf("%s: carry-over must be between 0 and %d (the limit and the carry-over together at most %d), got %d",
			c.Algorithm, MaxLimit-c.Limit, int64(MaxLimit), c.CarryOver)
	}
	loc, err := c.Calendar.location()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", c.Algorithm, err)
	}
	return newCalendarWindow(c, loc), nil
}
