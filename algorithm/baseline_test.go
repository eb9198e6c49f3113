package algorithm

import (
	"sort"
	"testing"
	"time"
)

// The baseline's window model: L = 600 per 60 s, 12 slices of 5 s, a token
// bucket of 60 refilled at 10 per second, 180 s of traffic with integer
// millisecond timestamps.
const (
	baseLimit    = 600
	baseWindowMS = 60_000
	baseSliceMS  = 5_000
	baseDuration = 180_000
)

// baselinePatterns builds the baseline's three request patterns, in milliseconds.
func baselinePatterns() map[string][]int64 {
	uniform := []int64{}
	for t := int64(0); t < baseDuration; t += baseWindowMS / (2 * baseLimit) {
		uniform = append(uniform, t)
	}
	piled := []int64{}
	for _, b := range []int64{baseWindowMS, 2 * baseWindowMS} {
		for _, start := range []int64{b - baseSliceMS, b} {
			for i := int64(0); i < baseLimit; i++ {
				piled = append(piled, start+i*baseSliceMS/baseLimit)
			}
		}
	}
	sort.Slice(piled, func(i, j int) bool { return piled[i] < piled[j] })
	spaced := []int64{}
	for k := int64(0); k < baseDuration/baseWindowMS; k++ {
		for i := int64(0); i < baseLimit; i++ {
			spaced = append(spaced, k*baseWindowMS+i*baseSliceMS/baseLimit)
		}
	}
	return map[string][]int64{"uniform 2x": uniform, "piled at boundary": piled, "spaced at the limit": spaced}
}

// busiest returns the most timestamps inside any window-long interval, as
// the baseline measures it; times must be sorted.
func busiest(times []int64, window int64) int {
	peak := 0
	for i, j := 0, 0; i < len(times); i++ {
		for times[i]-times[j] >= window {
			j++
		}
		peak = max(peak, i-j+1)
	}
	return peak
}

// runBaseline drives alg over ms timestamps and returns accepted, rejected and
// the busiest window.
func runBaseline(t *testing.T, alg Algorithm, times []int64) (acc, rej, peak int) {
	t.Helper()
	state := make([]int64, alg.Words())
	var accepted []int64
	for _, ms := range times {
		if alg.Decide(state, ms*int64(time.Millisecond), 1).Allowed {
			accepted = append(accepted, ms)
		} else {
			rej++
		}
	}
	return len(accepted), rej, busiest(accepted, baseWindowMS)
}

func TestBaselineWindowTable(t *testing.T) {
	configs := map[Name]Config{
		FixedWindow:   {Algorithm: FixedWindow, Limit: baseLimit, Window: time.Minute},
		SlidingWindow: {Algorithm: SlidingWindow, Limit: baseLimit, Window: time.Minute, Slices: 12},
		TokenBucket:   {Algorithm: TokenBucket, Limit: baseLimit, Window: time.Minute, Capacity: 60, Rate: 10},
	}
	want := []struct {
		pattern        string
		alg            Name
		acc, rej, peak int
	}{
		{"uniform 2x", FixedWindow, 1800, 1800, 600},
		{"piled at boundary", FixedWindow, 1800, 600, 1200},
		{"spaced at the limit", FixedWindow, 1800, 0, 600},
		{"uniform 2x", SlidingWindow, 1800, 1800, 600},
		{"piled at boundary", SlidingWindow, 1200, 1200, 600},
		{"spaced at the limit", SlidingWindow, 1800, 0, 600},
		{"uniform 2x", TokenBucket, 1859, 1741, 659},
		{"piled at boundary", TokenBucket, 318, 2082, 159},
		{"spaced at the limit", TokenBucket, 327, 1473, 109},
	}
	patterns := baselinePatterns()
	for _, w := range want {
		alg, err := New(configs[w.alg])
		if err != nil {
			t.Errorf("%s: %v", w.alg, err)
			continue
		}
		acc, rej, peak := runBaseline(t, alg, patterns[w.pattern])
		if acc != w.acc || rej != w.rej || peak != w.peak {
			t.Errorf("%s on %q: accepted/rejected/busiest = %d/%d/%d, the baseline says %d/%d/%d",
				w.alg, w.pattern, acc, rej, peak, w.acc, w.rej, w.peak)
		}
	}
}

// TestBaselinePatternsPromises runs the baseline's patterns through the algorithms
// that promise more than the baseline's three: the exact log and bounded-log keep
// the busiest window within L and (1+e)·L, and accept every request of the
// compliant "spaced at the limit" pattern.
func TestBaselinePatternsPromises(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: SlidingLog, Limit: baseLimit, Window: time.Minute},
		{Algorithm: BoundedLog, Limit: baseLimit, Window: time.Minute, Tolerance: 0.05},
		{Algorithm: BoundedLog, Limit: baseLimit, Window: time.Minute, Tolerance: 0.1},
	} {
		alg := mustNew(t, c)
		bound := int(float64(baseLimit) * (1 + c.Tolerance))
		for name, times := range baselinePatterns() {
			acc, rej, peak := runBaseline(t, alg, times)
			t.Logf("%s e=%v %q: accepted %d rejected %d busiest %d", c.Algorithm, c.Tolerance, name, acc, rej, peak)
			if peak > bound {
				t.Errorf("%s on %q: busiest %d > %d", c.Algorithm, name, peak, bound)
			}
			if name == "spaced at the limit" && rej != 0 {
				t.Errorf("%s rejected %d compliant requests", c.Algorithm, rej)
			}
		}
	}
}

// TestAdversaries builds the traffic that reaches each window algorithm's
// documented worst case, so the bounds the property tests check are known to
// be reached, not only respected.
func TestAdversaries(t *testing.T) {
	burst := func(at int64, n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = at
		}
		return out
	}
	cases := []struct {
		c     Config
		times []int64 // ms
		want  int     // busiest window
	}{
		// L just before a boundary, L just after: 2L.
		{Config{Algorithm: FixedWindow, Limit: baseLimit, Window: time.Minute},
			append(burst(59_999, baseLimit), burst(60_000, baseLimit)...), 2 * baseLimit},
		// L at the end of slice 0, L once slice 0 stops counting (at 60 s,
		// only 55.001 s later): 2L.
		{Config{Algorithm: SlidingWindow, Limit: baseLimit, Window: time.Minute},
			append(burst(4_999, baseLimit), burst(60_000, baseLimit)...), 2 * baseLimit},
		// One unit opens an entry at 0, m-1 more fill it at 59.999 s; at
		// 60 s the entry straddles and is not counted, so L more pass:
		// L + m - 1 = 629 of the (1+e)·L = 630 bound.
		{Config{Algorithm: BoundedLog, Limit: baseLimit, Window: time.Minute},
			append(append(burst(0, 1), burst(59_999, 29)...), burst(60_000, baseLimit)...), baseLimit + 29},
		// The exact log gives nothing away to the same traffic.
		{Config{Algorithm: SlidingLog, Limit: baseLimit, Window: time.Minute},
			append(append(burst(0, 1), burst(59_999, 29)...), burst(60_000, baseLimit)...), baseLimit},
	}
	for _, tc := range cases {
		t.Run(string(tc.c.Algorithm), func(t *testing.T) {
			a := mustNew(t, tc.c)
			_, _, peak := runBaseline(t, a, tc.times)
			if peak != tc.want {
				t.Errorf("%s: busiest window %d, want %d", tc.c.Algorithm, peak, tc.want)
			}
		})
	}
}
