package algorithm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// testConfigs returns one configuration of every algorithm with limit l and
// window w.
func testConfigs(l int64, w time.Duration) []Config {
	var cs []Config
	for _, name := range Names() {
		cs = append(cs, Config{Algorithm: name, Limit: l, Window: w})
	}
	return cs
}

func mustNew(t testing.TB, c Config) Algorithm {
	t.Helper()
	a, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return a
}

// checkDecision fails if d breaks a rule every decision keeps.
func checkDecision(t *testing.T, a Algorithm, d Decision, cost int64) {
	t.Helper()
	if d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0 {
		t.Fatalf("%s: negative field in %+v", a.Name(), d)
	}
	if d.Allowed && (d.RetryAfter != 0 || d.Reason != "") {
		t.Fatalf("%s: allowed decision with retry or reason: %+v", a.Name(), d)
	}
	if !d.Allowed && d.Reason == "" {
		t.Fatalf("%s: rejection without a reason: %+v", a.Name(), d)
	}
	if d.Delay != 0 && a.Name() != LeakyBucket {
		t.Fatalf("%s: delay set: %+v", a.Name(), d)
	}
}

func TestNewDefaultsAndErrors(t *testing.T) {
	a := mustNew(t, Config{Limit: 600, Window: time.Minute})
	if a.Name() != BoundedLog || a.Config().Tolerance != 0.05 {
		t.Errorf("default: got %s with tolerance %v, want bounded-log with 0.05", a.Name(), a.Config().Tolerance)
	}
	if got := mustNew(t, Config{Algorithm: SlidingWindow, Limit: 600, Window: time.Minute}); got.Config().Slices != 12 || got.Words() != 4 {
		t.Errorf("sliding-window: slices %d words %d, want 12 and 4", got.Config().Slices, got.Words())
	}
	tb := mustNew(t, Config{Algorithm: TokenBucket, Limit: 600, Window: time.Minute})
	if c := tb.Config(); c.Capacity != 600 || c.Rate != 10 {
		t.Errorf("token-bucket defaults: capacity %d rate %v, want 600 and 10", c.Capacity, c.Rate)
	}
	if c := mustNew(t, Config{Algorithm: GCRA, Limit: 600, Window: time.Minute}).Config(); c.Burst != 600 {
		t.Errorf("gcra default burst %d, want the limit, 600", c.Burst)
	}
	if c := mustNew(t, Config{Algorithm: LeakyBucket, Limit: 600, Window: time.Minute}).Config(); c.MaxDelay != time.Minute || c.Rate != 10 {
		t.Errorf("leaky-bucket defaults: max delay %v rate %v", c.MaxDelay, c.Rate)
	}
	if _, err := New(Config{Algorithm: Concurrency, Limit: 10}); err != nil {
		t.Errorf("concurrency without window: %v", err)
	}

	bad := []struct {
		c    Config
		want string
	}{
		{Config{Algorithm: "leaky", Limit: 1, Window: time.Second}, "unknown algorithm"},
		{Config{Algorithm: FixedWindow, Limit: 0, Window: time.Second}, "limit must be at least 1"},
		{Config{Algorithm: FixedWindow, Limit: MaxLimit + 1, Window: time.Second}, "above the maximum"},
		{Config{Algorithm: FixedWindow, Limit: 1, Window: 0}, "window must be positive"},
		{Config{Algorithm: FixedWindow, Limit: 1, Window: MaxWindow + 1}, "longer than the maximum"},
		{Config{Algorithm: Concurrency, Limit: 1, Window: -1}, "must not be negative"},
		{Config{Algorithm: SlidingWindow, Limit: 1, Window: time.Second, Slices: maxSlices + 1}, "slices must be"},
		{Config{Algorithm: SlidingWindow, Limit: 1, Window: 5, Slices: 12}, "too short"},
		{Config{Algorithm: SlidingLog, Limit: maxLogSize + 1, Window: time.Second}, "use bounded-log"},
		{Config{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Rate: math.NaN()}, "rate must be"},
		{Config{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Rate: -1}, "rate must be"},
		{Config{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Rate: 1e10}, "out of range"},
		{Config{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Capacity: -1}, "capacity must be"},
		{Config{Algorithm: TokenBucket, Limit: 1, Window: time.Second, Capacity: MaxLimit, Rate: 1e-3}, "longer than the maximum"},
		{Config{Algorithm: GCRA, Limit: 1, Window: MaxWindow, Burst: 3}, "longer than the maximum"},
		{Config{Algorithm: LeakyBucket, Limit: 1, Window: time.Second, MaxDelay: -1}, "max delay"},
		{Config{Algorithm: BoundedLog, Limit: 10, Window: time.Second, Tolerance: 2}, "tolerance"},
		{Config{Algorithm: BoundedLog, Limit: 10, Window: time.Second, Tolerance: math.NaN()}, "tolerance"},
		{Config{Algorithm: BoundedLog, Limit: MaxLimit, Window: time.Second, Tolerance: 1e-9}, "raise the tolerance"},
	}
	for _, b := range bad {
		t.Run(fmt.Sprintf("%s %s", b.c.Algorithm, b.want), func(t *testing.T) {
			_, err := New(b.c)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("New(%+v) = %v, want an error containing %q", b.c, err, b.want)
			}
		})
	}
	if _, err := New(Config{Algorithm: "nope", Limit: 1, Window: 1}); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown name: %v, want ErrUnknown", err)
	}
}

// TestBoundedLogSize checks the ring size formula: twice the entries of m
// units the limit needs (Decide needs ceil(L/m)+2, Record's time-capped
// entries as many again), plus two.
func TestBoundedLogSize(t *testing.T) {
	for _, tc := range []struct {
		l       int64
		e       float64
		m, size int64
	}{
		{600, 0.05, 30, 42},
		{600, 0.1, 60, 22},
		{10, 0.05, 1, 22},
		{1, 0.05, 1, 4},
		{7, 0.5, 3, 8},
	} {
		t.Run(fmt.Sprintf("L=%d,e=%v", tc.l, tc.e), func(t *testing.T) {
			m, size := boundedLogSize(tc.l, tc.e)
			if m != tc.m || size != tc.size {
				t.Errorf("L=%d e=%v: m=%d size=%d, want %d and %d", tc.l, tc.e, m, size, tc.m, tc.size)
			}
		})
	}
	a := mustNew(t, Config{Limit: 600, Window: time.Minute})
	if a.Words() != 2+3*42 {
		t.Errorf("bounded-log 600/min words = %d, want %d", a.Words(), 2+3*42)
	}
}

func TestZeroStateAndCosts(t *testing.T) {
	const now = int64(1_700_000_000) * 1e9
	for _, c := range testConfigs(10, time.Second) {
		a := mustNew(t, c)
		s := make([]int64, a.Words())
		for _, cost := range []int64{0, -1, math.MinInt64} {
			d := a.Decide(s, now, cost)
			if d.Allowed || d.Reason != ReasonBadCost {
				t.Errorf("%s: cost %d: %+v, want rejection for bad cost", a.Name(), cost, d)
			}
		}
		for _, cost := range []int64{11, math.MaxInt64} {
			d := a.Decide(s, now, cost)
			if d.Allowed || d.Reason != ReasonCostOverLimit || d.RetryAfter != 0 {
				t.Errorf("%s: cost %d: %+v, want rejection for cost over limit", a.Name(), cost, d)
			}
		}
		if slices.ContainsFunc(s, func(x int64) bool { return x != 0 }) {
			t.Errorf("%s: rejected costs changed the state: %v", a.Name(), s)
		}
		d := a.Decide(s, now, 10)
		if !d.Allowed || d.Limit != 10 {
			t.Errorf("%s: zero state, cost = limit: %+v, want allowed", a.Name(), d)
		}
		if a.Name() != LeakyBucket && d.Remaining != 0 {
			t.Errorf("%s: remaining %d after taking the whole limit", a.Name(), d.Remaining)
		}
	}
}

// TestGCRABurstCost checks that gcra's cost bound is its burst.
func TestGCRABurstCost(t *testing.T) {
	a := mustNew(t, Config{Algorithm: GCRA, Limit: 10, Window: time.Second, Burst: 3})
	s := make([]int64, a.Words())
	if d := a.Decide(s, 0, 4); d.Reason != ReasonCostOverLimit {
		t.Errorf("cost over burst: %+v", d)
	}
	if d := a.Decide(s, 0, 3); !d.Allowed {
		t.Errorf("cost = burst: %+v", d)
	}
}

// TestClockBackwards runs traffic whose clock jumps back, and checks that
// the earlier time never gets more than the latest time would.
func TestClockBackwards(t *testing.T) {
	// These keep the latest time in the state and decide exactly as at it;
	// the window counters know only the newest window or slice.
	exact := map[Name]bool{SlidingLog: true, TokenBucket: true, GCRA: true,
		LeakyBucket: true, Concurrency: true, BoundedLog: true}
	for _, c := range testConfigs(20, time.Second) {
		a := mustNew(t, c)
		rng := rand.New(rand.NewPCG(1, 2))
		s := make([]int64, a.Words())
		latest, stateLatest := int64(5e9), int64(0)
		for i := range 3000 {
			now := latest + rng.Int64N(int64(30*time.Millisecond))
			if i%3 == 0 {
				now = latest - rng.Int64N(int64(3*time.Second)) // back, up to 3 windows
			}
			latest = max(latest, now)
			cost := 1 + rng.Int64N(3)
			back := a.Peek(s, now, cost)
			ahead := a.Peek(s, latest, cost)
			checkDecision(t, a, back, cost)
			if back.Allowed && !ahead.Allowed {
				t.Fatalf("%s: at %d (latest %d) allowed %+v, but the latest time rejects: %+v", a.Name(), now, latest, back, ahead)
			}
			if exact[a.Name()] && now < stateLatest {
				if at := a.Peek(s, stateLatest, cost); back != at {
					t.Fatalf("%s: at %d (state's latest %d) decided %+v, at the latest time %+v", a.Name(), now, stateLatest, back, at)
				}
			}
			if back.Allowed && back.Remaining > ahead.Remaining {
				t.Fatalf("%s: going back gave remaining %d > %d", a.Name(), back.Remaining, ahead.Remaining)
			}
			if d := a.Decide(s, now, cost); d.Allowed {
				stateLatest = max(stateLatest, now)
				if a.Name() == Concurrency && i%2 == 0 {
					a.Release(s, now, cost)
				}
			}
		}
	}
}

// TestHugeGapsAndExtremeTimes checks that times far apart, negative or past
// maxTime neither panic nor break the rules, and that a long-idle key is
// back to a full allowance.
func TestHugeGapsAndExtremeTimes(t *testing.T) {
	times := []int64{math.MinInt64, -1, 0, 1, int64(MaxWindow), 1 << 61, maxTime - 1, maxTime, math.MaxInt64}
	for _, c := range testConfigs(5, time.Hour) {
		a := mustNew(t, c)
		s := make([]int64, a.Words())
		for _, now := range times {
			for range 7 {
				d := a.Decide(s, now, 1)
				checkDecision(t, a, d, 1)
			}
			a.Record(s, now, math.MaxInt64)
			a.Release(s, now, math.MaxInt64)
		}
		// From the zero state, a gap of far more than IdleAfter restores everything.
		s = make([]int64, a.Words())
		for range 5 {
			a.Decide(s, 1e9, 1)
		}
		full := int64(5)
		if a.Name() == GCRA {
			full = 1
		}
		if d := a.Peek(s, 1e9+int64(1000*time.Hour), full); !d.Allowed && a.Name() != Concurrency {
			t.Errorf("%s: full allowance not back after a long gap: %+v", a.Name(), d)
		}
	}
}

// TestRecord checks that recorded units count against the limit, and that
// recording events older than the state's latest time is tolerated.
func TestRecord(t *testing.T) {
	for _, c := range testConfigs(8, time.Second) {
		a := mustNew(t, c)
		s := make([]int64, a.Words())
		now := int64(10e9)
		a.Record(s, now, 8)
		if a.Name() == LeakyBucket {
			a.Record(s, now, 8) // the queue holds a full window more
		}
		if d := a.Peek(s, now, 1); d.Allowed {
			t.Errorf("%s: allowed after recording the whole limit: %+v", a.Name(), d)
		}
		// Older events, some outside the window, in any order.
		for i := range 20 {
			a.Record(s, now-int64(i)*int64(97*time.Millisecond), 1)
			a.Record(s, now, 0)
			a.Record(s, now, -3)
		}
		d := a.Peek(s, now, 1)
		checkDecision(t, a, d, 1)
		if d.Allowed {
			t.Errorf("%s: allowed after recording more than the limit: %+v", a.Name(), d)
		}
	}
}

// TestRecordSlidingLogOrder checks that the sliding log, being exact, ends up
// with the same decisions whatever order events are recorded in.
func TestRecordSlidingLogOrder(t *testing.T) {
	a := mustNew(t, Config{Algorithm: SlidingLog, Limit: 50, Window: time.Second})
	rng := rand.New(rand.NewPCG(3, 4))
	events := make([]int64, 80)
	for i := range events {
		events[i] = 10e9 + rng.Int64N(int64(2*time.Second))
	}
	sorted := slices.Clone(events)
	slices.Sort(sorted)
	s1, s2 := make([]int64, a.Words()), make([]int64, a.Words())
	for i := range events {
		a.Record(s1, events[i], 1)
		a.Record(s2, sorted[i], 1)
	}
	for now := int64(10e9); now < 13e9; now += int64(50 * time.Millisecond) {
		d1, d2 := a.Peek(s1, now, 3), a.Peek(s2, now, 3)
		if d1 != d2 {
			t.Fatalf("at %d: shuffled %+v, sorted %+v", now, d1, d2)
		}
	}
}

// TestIdleAfter checks that a state untouched for IdleAfter decides like a
// zero state.
func TestIdleAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range testConfigs(12, 700*time.Millisecond) {
		a := mustNew(t, c)
		if a.IdleAfter() <= 0 {
			t.Errorf("%s: IdleAfter %v", a.Name(), a.IdleAfter())
			continue
		}
		for range 50 {
			s := make([]int64, a.Words())
			now, last := int64(1e9), int64(0)
			for range rng.IntN(40) {
				now += rng.Int64N(int64(100 * time.Millisecond))
				if a.Decide(s, now, 1+rng.Int64N(3)).Allowed {
					last = now
				}
			}
			if last == 0 {
				continue
			}
			at := last + int64(a.IdleAfter())
			zero := make([]int64, a.Words())
			for cost := int64(1); cost <= 12; cost++ {
				if got, want := a.Peek(s, at, cost), a.Peek(zero, at, cost); got != want {
					t.Fatalf("%s: after IdleAfter, cost %d: %+v, zero state gives %+v", a.Name(), cost, got, want)
				}
			}
		}
	}
}

// TestAllocs checks that deciding allocates nothing.
func TestAllocs(t *testing.T) {
	for _, c := range testConfigs(600, time.Minute) {
		a := mustNew(t, c)
		s := make([]int64, a.Words())
		now := int64(0)
		allocs := testing.AllocsPerRun(1000, func() {
			now += int64(50 * time.Millisecond)
			a.Decide(s, now, 1)
			a.Peek(s, now, 1)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per decision", a.Name(), allocs)
		}
	}
}

// TestLeakyBucketQueue follows a queue filling up: 10 per second, at most
// 1 s of delay.
func TestLeakyBucketQueue(t *testing.T) {
	a := mustNew(t, Config{Algorithm: LeakyBucket, Limit: 10, Window: time.Second})
	s := make([]int64, a.Words())
	for i := range 11 {
		d := a.Decide(s, 0, 1)
		if want := time.Duration(i) * 100 * time.Millisecond; !d.Allowed || d.Delay != want {
			t.Fatalf("request %d: %+v, want allowed with delay %v", i, d, want)
		}
	}
	d := a.Decide(s, 0, 1)
	if d.Allowed || d.Reason != ReasonQueueFull || d.RetryAfter != 100*time.Millisecond || d.ResetAfter != 1100*time.Millisecond {
		t.Fatalf("12th request: %+v, want queue full, retry after 100ms, reset after 1.1s", d)
	}
	if d := a.Peek(s, int64(100*time.Millisecond)-1, 1); d.Allowed {
		t.Fatalf("accepted 1ns before RetryAfter: %+v", d)
	}
	if d := a.Peek(s, int64(100*time.Millisecond), 1); !d.Allowed || d.Delay != time.Second {
		t.Fatalf("at RetryAfter: %+v, want allowed with a delay of 1s", d)
	}
}

// TestNameValid: every name New accepts is Valid, and near misses (a
// different case, an underscore, the empty name New reads as BoundedLog)
// are not.
func TestNameValid(t *testing.T) {
	for _, n := range Names() {
		if !n.Valid() {
			t.Errorf("%q.Valid() = false", n)
		}
	}
	for _, n := range []Name{"", "Fixed-Window", "fixed_window", "token bucket", "gcra "} {
		if n.Valid() {
			t.Errorf("%q.Valid() = true", n)
		}
		if n != "" {
			if _, err := New(Config{Algorithm: n, Limit: 1, Window: time.Second}); !errors.Is(err, ErrUnknown) {
				t.Errorf("New(%q) = %v, want ErrUnknown", n, err)
			}
		}
	}
}
