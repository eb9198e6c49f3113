package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

var ctx = context.Background()

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// baseShape is the baseline's model: 600 per 60 s, 12 slices, 180 s.
var baseShape = Shape{Limit: 600, Window: time.Minute, Slices: 12, Duration: 180 * time.Second}

func TestBusiest(t *testing.T) {
	W := ms(1000)
	cases := []struct {
		at   []int64
		want int64
	}{
		{nil, 0},
		{[]int64{5}, 1},
		{[]int64{0, 999}, 2},        // 999 < W: one window
		{[]int64{0, 1000}, 1},       // exactly W apart: never in one window
		{[]int64{0, 0, 0, 1000}, 3}, // pile counts whole
		{[]int64{0, 400, 800, 1200, 1600}, 3},
		{[]int64{1600, 0, 800, 400, 1200}, 3}, // unsorted input is sorted
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.at), func(t *testing.T) {
			var ev []Event
			for _, a := range c.at {
				ev = append(ev, Event{ms(a), 1})
			}
			if got := Busiest(ev, W); got != c.want {
				t.Errorf("Busiest(%v) = %d, want %d", c.at, got, c.want)
			}
		})
	}
	if got := Busiest([]Event{{0, 5}, {ms(10), 7}, {ms(2000), 1}}, W); got != 12 {
		t.Errorf("Busiest with costs = %d, want 12", got)
	}
}

func TestFalseRejects(t *testing.T) {
	W := ms(1000)
	reqs := []Request{
		{At: 0, Key: "a"}, {At: 0, Key: "a"}, // a sends 2: within a limit of 2
		{At: ms(10), Key: "a"},            // a's third in the window
		{At: ms(10), Key: "b"},            // b's first
		{At: ms(1000), Key: "a", Cost: 2}, // the two at 0 have left the window: a's sent is 1+2 = 3
		{At: ms(1009), Key: "b", Cost: 2}, // b: 1+2 = 3 (b@10 is 999ms before: still in)
		{At: ms(1010), Key: "a"},          // the one at 10 has left: a's sent is 2+1 = 3
		{At: ms(3000), Key: "b", Cost: 2}, // b alone: 2
	}
	outs := make([]Outcome, len(reqs))
	for i := range outs {
		outs[i].Allowed = false // every request rejected
	}
	// Rejections within the limit of 2: a's first two, b's first, and b's last.
	if got := FalseRejects(reqs, outs, 2, W); got != 4 {
		t.Errorf("FalseRejects = %d, want 4", got)
	}
	outs[0].Allowed = true
	if got := FalseRejects(reqs, outs, 2, W); got != 3 {
		t.Errorf("FalseRejects with the first accepted = %d, want 3", got)
	}
}

func TestRunUsesVirtualClock(t *testing.T) {
	lim := floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 2, Window: time.Hour}
	// Three requests in the first hour of virtual time, then one just after
	// the boundary: the run takes no wall time, yet the window resets.
	reqs := []Request{{At: 0, Key: "k"}, {At: ms(1), Key: "k"}, {At: time.Hour - 1, Key: "k"}, {At: time.Hour, Key: "k"}}
	start := time.Now()
	outs, err := Run(ctx, lim, reqs)
	if err != nil {
		t.Fatal(err)
	}
	got := []bool{outs[0].Allowed, outs[1].Allowed, outs[2].Allowed, outs[3].Allowed}
	if want := []bool{true, true, false, true}; !equal(got, want) {
		t.Errorf("allowed = %v, want %v", got, want)
	}
	if time.Since(start) > time.Minute {
		t.Errorf("run took wall-clock time")
	}
	if outs[2].Decision.RetryAfter != 1 {
		t.Errorf("RetryAfter just before the boundary = %v, want 1ns", outs[2].Decision.RetryAfter)
	}
}

func TestRunRejectsUnsortedAndBadLimits(t *testing.T) {
	lim := floodgate.Limit{Algorithm: algorithm.SlidingLog, Limit: 2, Window: time.Second}
	_, err := Run(ctx, lim, []Request{{At: ms(5), Key: "k"}, {At: ms(4), Key: "k"}})
	if err == nil || !strings.Contains(err.Error(), "sorted") {
		t.Errorf("unsorted requests: error %v, want one saying they must be sorted", err)
	}
	_, err = Run(ctx, floodgate.Limit{Algorithm: "nope", Limit: 1, Window: time.Second}, nil)
	if !errors.Is(err, algorithm.ErrUnknown) {
		t.Errorf("unknown algorithm: error %v, want ErrUnknown", err)
	}
}

func TestRunLeakyAndConcurrency(t *testing.T) {
	// Leaky bucket leaking 1 per 100ms: three requests at once proceed at
	// 0, 100 and 200 ms.
	leaky := floodgate.Limit{Algorithm: algorithm.LeakyBucket, Limit: 10, Window: time.Second}
	reqs := []Request{{At: 0, Key: "k"}, {At: 0, Key: "k"}, {At: 0, Key: "k"}}
	outs, err := Run(ctx, leaky, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if !o.Allowed || o.Effective != o.Decision.Delay {
			t.Errorf("leaky request %d: allowed %v, effective %v, delay %v", i, o.Allowed, o.Effective, o.Decision.Delay)
		}
	}
	if outs[2].Effective <= outs[1].Effective || outs[1].Effective <= outs[0].Effective {
		t.Errorf("leaky requests proceed at %v, %v, %v; want increasing", outs[0].Effective, outs[1].Effective, outs[2].Effective)
	}
	// Concurrency 1 with release after each decision: all accepted.
	conc := floodgate.Limit{Algorithm: algorithm.Concurrency, Limit: 1, Window: time.Second}
	outs, err = Run(ctx, conc, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if !o.Allowed {
			t.Errorf("concurrency request %d rejected; the simulator should have released the one before", i)
		}
	}
}

func TestPatterns(t *testing.T) {
	ps, err := Patterns(baseShape, "c")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{Uniform2x: 3600, PiledBoundary: 2400, SpacedAtLimit: 1800}
	for _, p := range ps {
		if len(p.Requests) != want[p.Name] {
			t.Errorf("%s: %d requests, want %d", p.Name, len(p.Requests), want[p.Name])
		}
		for i, r := range p.Requests {
			if r.At%time.Millisecond != 0 || (i > 0 && r.At < p.Requests[i-1].At) {
				t.Fatalf("%s: request %d at %v: not whole ms or not sorted", p.Name, i, r.At)
			}
		}
	}
	u, piled, spaced := ps[0].Requests, ps[1].Requests, ps[2].Requests
	if u[1].At != ms(50) || u[len(u)-1].At != ms(179950) {
		t.Errorf("uniform 2x: second at %v, last at %v; want 50ms and 179.95s", u[1].At, u[len(u)-1].At)
	}
	// Piled: 600 in [55s, 60s), 600 in [60s, 65s), and again at 120 s.
	if piled[0].At != ms(55000) || piled[599].At != ms(55000+599*5000/600) || piled[600].At != ms(60000) || piled[2399].At != ms(120000+599*5000/600) {
		t.Errorf("piled at boundary: times %v %v %v %v", piled[0].At, piled[599].At, piled[600].At, piled[2399].At)
	}
	if spaced[600].At != ms(60000) || spaced[1].At != ms(8) {
		t.Errorf("spaced: request 1 at %v, 600 at %v; want 8ms and 60s", spaced[1].At, spaced[600].At)
	}
	for _, bad := range []Shape{
		{Limit: 0, Window: time.Minute, Slices: 12, Duration: time.Minute},
		{Limit: 600, Window: time.Second, Slices: 12, Duration: time.Minute}, // 2L > W in ms
		{Limit: 600, Window: time.Minute, Slices: 0, Duration: time.Minute},  // no slices
		{Limit: 600, Window: time.Minute, Slices: 12, Duration: time.Second}, // T < W
		{Limit: 600, Window: 1500 * time.Microsecond, Slices: 1, Duration: 2 * time.Second},
	} {
		if _, err := Patterns(bad, "c"); err == nil {
			t.Errorf("Patterns(%+v) succeeded, want an error", bad)
		}
	}
}

// TestBaselineWindowTable runs the reference patterns through the real algorithms
// and holds the fixed-window, sliding-window and token-bucket rows to the
// baseline's table, and every algorithm to its documented bound.
func TestBaselineWindowTable(t *testing.T) {
	tables, err := Window(ctx, baseShape, Configs(floodgate.Limit{Limit: 600, Window: time.Minute, Slices: 12}, 60))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		acc, rej int
		busiest  int64
	}
	want := map[string]map[algorithm.Name]row{
		Uniform2x:     {algorithm.FixedWindow: {1800, 1800, 600}, algorithm.SlidingWindow: {1800, 1800, 600}, algorithm.TokenBucket: {1859, 1741, 659}},
		PiledBoundary: {algorithm.FixedWindow: {1800, 600, 1200}, algorithm.SlidingWindow: {1200, 1200, 600}, algorithm.TokenBucket: {318, 2082, 159}},
		SpacedAtLimit: {algorithm.FixedWindow: {1800, 0, 600}, algorithm.SlidingWindow: {1800, 0, 600}, algorithm.TokenBucket: {327, 1473, 109}},
	}
	for _, tab := range tables {
		t.Run(tab.Name, func(t *testing.T) {
			if len(tab.Results) != len(algorithm.Names()) {
				t.Fatalf("%s: %d results, want %d", tab.Name, len(tab.Results), len(algorithm.Names()))
			}
			for _, r := range tab.Results {
				if r.Accepted+r.Rejected != len(tab.Requests) || r.Overshoot != r.Busiest-600 {
					t.Errorf("%s/%s: inconsistent %+v", tab.Name, r.Algorithm, r.Summary)
				}
				if w, ok := want[tab.Name][r.Algorithm]; ok {
					if got := (row{r.Accepted, r.Rejected, r.Busiest}); got != w {
						t.Errorf("%s/%s: accepted/rejected/busiest = %v, the baseline says %v", tab.Name, r.Algorithm, got, w)
					}
				}
				switch r.Algorithm {
				case algorithm.SlidingLog:
					if r.Busiest > 600 || r.FalseRejects != 0 {
						t.Errorf("%s/sliding-log: busiest %d, false rejects %d; want <= 600 and 0", tab.Name, r.Busiest, r.FalseRejects)
					}
				case algorithm.BoundedLog:
					if r.Busiest > 630 || r.FalseRejects != 0 {
						t.Errorf("%s/bounded-log: busiest %d, false rejects %d; want <= 630 and 0", tab.Name, r.Busiest, r.FalseRejects)
					}
				}
			}
		})
	}
	// The baseline's point about the token bucket, in this package's measure:
	// every rejection of the compliant "spaced" client is a false reject.
	tb := tables[2].Results[4]
	if tb.Algorithm != algorithm.TokenBucket || tb.FalseRejects != 1473 {
		t.Errorf("spaced/%s: %d false rejects, want 1473", tb.Algorithm, tb.FalseRejects)
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEpochIsAWindowBoundary(t *testing.T) {
	for _, w := range []time.Duration{time.Minute, 7 * time.Second, 1500 * time.Millisecond, time.Hour} {
		e := Epoch(w)
		if e.UnixNano()%int64(w) != 0 || e.After(base) || base.Sub(e) >= w {
			t.Errorf("Epoch(%v) = %v: not the last multiple of the window at or before %v", w, e, base)
		}
	}
}
