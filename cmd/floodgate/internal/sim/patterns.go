package sim

import (
	"fmt"
	"sort"
	"time"
)

// Shape holds the parameters the baseline's request patterns are built from.
type Shape struct {
	Limit    int64         // L: requests allowed per window
	Window   time.Duration // W
	Slices   int           // the window is cut into this many slices of s = W/Slices
	Duration time.Duration // T: how long the uniform and spaced patterns run
}

func (s Shape) check() error {
	switch {
	case s.Limit < 1:
		return fmt.Errorf("sim: limit must be at least 1, got %d", s.Limit)
	case s.Window < time.Millisecond || s.Window%time.Millisecond != 0:
		return fmt.Errorf("sim: window must be a positive whole number of milliseconds, got %v", s.Window)
	case s.Slices < 1 || time.Duration(s.Slices)*time.Millisecond > s.Window:
		return fmt.Errorf("sim: slices must be from 1 to the window in milliseconds (%d), got %d", s.Window/time.Millisecond, s.Slices)
	case s.Duration < s.Window || s.Duration%time.Millisecond != 0:
		return fmt.Errorf("sim: duration must be whole milliseconds and at least the window (%v), got %v", s.Window, s.Duration)
	case 2*s.Limit > int64(s.Window/time.Millisecond):
		return fmt.Errorf("sim: limit %d is too high for whole-millisecond patterns over %v: at most %d", s.Limit, s.Window, s.Window/time.Millisecond/2)
	case int64(s.Duration/s.Window)*2*s.Limit > 10_000_000:
		return fmt.Errorf("sim: %v of traffic at twice %d per %v is more than 10 million requests", s.Duration, s.Limit, s.Window)
	}
	return nil
}

// Pattern is a named list of requests, sorted by time.
type Pattern struct {
	Name     string
	Requests []Request
}

// Pattern names.
const (
	Uniform2x     = "uniform 2x"
	PiledBoundary = "piled at boundary"
	SpacedAtLimit = "spaced at the limit"
)

// Patterns returns the three reference patterns for shape, all on one key,
// with timestamps in whole milliseconds (L = Limit, W = Window, s = W/Slices,
// T = Duration, all in ms, floor division):
//
//   - uniform 2x: one request every W/(2L) from 0 while below T;
//   - piled at boundary: at each boundary b in {W, 2W}, L requests at
//     b - s + i·s/L and L at b + i·s/L, i = 0..L-1, sorted;
//   - spaced at the limit: for each window k = 0..T/W-1, L requests at
//     k·W + i·s/L.
func Patterns(shape Shape, key string) ([]Pattern, error) {
	if err := shape.check(); err != nil {
		return nil, err
	}
	L := shape.Limit
	W := int64(shape.Window / time.Millisecond)
	T := int64(shape.Duration / time.Millisecond)
	s := W / int64(shape.Slices)
	at := func(ms int64) Request { return Request{At: time.Duration(ms) * time.Millisecond, Key: key, Cost: 1} }

	var uniform []Request
	for t, step := int64(0), W/(2*L); t < T; t += step {
		uniform = append(uniform, at(t))
	}
	var piled []Request
	for _, b := range []int64{W, 2 * W} {
		for _, start := range []int64{b - s, b} {
			for i := int64(0); i < L; i++ {
				piled = append(piled, at(start+i*s/L))
			}
		}
	}
	sort.SliceStable(piled, func(i, j int) bool { return piled[i].At < piled[j].At })
	var spaced []Request
	for k := int64(0); k < T/W; k++ {
		for i := int64(0); i < L; i++ {
			spaced = append(spaced, at(k*W+i*s/L))
		}
	}
	return []Pattern{{Uniform2x, uniform}, {PiledBoundary, piled}, {SpacedAtLimit, spaced}}, nil
}
