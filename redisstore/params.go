package redisstore

import (
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// paramsOf returns the parameter form of a (algorithm.Params), and false
// if a is not one of package algorithm's algorithms.
func paramsOf(a algorithm.Algorithm) (algorithm.Params, bool) {
	x, ok := a.(interface{ Params() algorithm.Params })
	if !ok {
		return algorithm.Params{}, false
	}
	return x.Params(), true
}

// scriptArgs returns the integer parameters the Redis script takes for
// the algorithm of p, with every duration in units of unit (the script
// counts time in microseconds). A window or delay that is
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
func scriptArgs(p algorithm.Params, unit time.Duration) ([]int64, error) {
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
	case algorithm.FixedWindow, algorithm.WeightedWindow, algorithm.SlidingLog:
		return []int64{p.Limit, w}, nil
	case algorithm.Concurrency:
		ttl, err := whole("lease TTL", p.LeaseTTL)
		if err != nil {
			return nil, err
		}
		return []int64{p.Limit, w, p.MaxLeases, ttl}, nil
	case algorithm.SlidingWindow:
		slice, err := whole("slice", p.Window/time.Duration(p.Slices))
		if err != nil || p.Window%time.Duration(p.Slices) != 0 {
			return nil, fmt.Errorf("%s: window %v does not split into %d slices of whole %v", p.Name, p.Window, p.Slices, unit)
		}
		return []int64{p.Limit, slice, int64(p.Slices)}, nil
	case algorithm.TokenBucket, algorithm.GCRA:
		return []int64{p.Limit, p.Capacity, iv, p.Capacity * iv}, nil
	case algorithm.LeakyBucket:
		md, err := whole("max delay", p.MaxDelay)
		if err != nil {
			return nil, err
		}
		return []int64{p.Limit, iv, md}, nil
	case algorithm.BoundedLog:
		return []int64{p.Limit, w, p.EntryUnits, p.Entries}, nil
	}
	return nil, fmt.Errorf("%w %q", algorithm.ErrUnknown, p.Name)
}
