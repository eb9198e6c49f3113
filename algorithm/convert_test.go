package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// converted returns st, written by from, as a state of to at now.
func converted(t testing.TB, from, to Algorithm, st []int64, now int64) []int64 {
	t.Helper()
	dst := make([]int64, to.Words())
	if !to.(interface {
		ConvertFrom(Algorithm, []int64, int64, []int64) bool
	}).ConvertFrom(from, st, now, dst) {
		t.Fatalf("Convert %+v -> %+v refused", from.Config(), to.Config())
	}
	return dst
}

// TestConvertRaiseAdmitsAtOnce: 10 per second raised to 1000 per second 50
// ms after 10 requests admits at once the 990 the new limit allows beyond
// them, and not one more; lowered back, it applies at once to the count.
func TestConvertRaiseAdmitsAtOnce(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, name := range []Name{BoundedLog, FixedWindow, GCRA, TokenBucket, WeightedWindow, SlidingWindow, LeakyBucket} {
		t.Run(string(name), func(t *testing.T) {
			low := mustNew(t, Config{Algorithm: name, Limit: 10, Window: time.Second, Counter: "c"})
			high := mustNew(t, Config{Algorithm: name, Limit: 1000, Window: time.Second, Counter: "c"})
			st := make([]int64, low.Words())
			base := int64(1_000_000) * int64(time.Second) // a window boundary
			for i := range int64(10) {
				if d := low.Decide(st, base+i*ms, 1); !d.Allowed {
					t.Fatalf("request %d under 10/s rejected", i)
				}
			}
			now := base + 50*ms
			if d := low.Peek(st, now, 1); d.Allowed && name != LeakyBucket {
				t.Fatalf("11th request under 10/s allowed")
			}
			hs := converted(t, low, high, st, now)
			admitted := 0
			for high.Decide(hs, now, 1).Allowed {
				admitted++
			}
			want := 990
			switch name {
			case GCRA, TokenBucket:
				// The 10 units spent 50 ms ago have half refilled at 10/s
				// (9.5 units of debt), kept as 10 whole units.
				want = 990
			case LeakyBucket:
				// The queue holds 9.5 requests' worth at 10/s; at 1000/s
				// it holds 10 of the up to 1001 a queue of W may hold.
				want = 991
			}
			if admitted != want {
				t.Fatalf("after the raise %d admitted at once, want %d", admitted, want)
			}
			// Lowered now, with 1000 counted: rejected at once.
			ls := converted(t, high, low, hs, now)
			if d := low.Peek(ls, now+ms, 1); d.Allowed {
				t.Fatalf("after lowering back to 10 a request was allowed with 1000 counted: %+v", d)
			}
		})
	}
}

// TestConvertBoundedLogPromise changes a bounded log's limit at random
// times under random traffic and checks the promise across the changes: for
// every accepted request at t, the units accepted in (t-W, t] are at most
// L(t) + the largest m in force since t-W; and a request whose units keep
// that true count within L(t) is rejected only within W of a lowered limit
// whose entries had to be combined.
func TestConvertBoundedLogPromise(t *testing.T) {
	const W = int64(time.Second)
	limits := []int64{1, 3, 10, 40, 100, 600, 1000}
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tol := []float64{0.05, 0.1, 0.3}[rng.IntN(3)]
		cur := mustNew(t, Config{Algorithm: BoundedLog, Limit: limits[rng.IntN(len(limits))], Window: time.Second, Tolerance: tol, Counter: "c"})
		st := make([]int64, cur.Words())
		var accepted []unitsAt
		type change struct {
			at, m    int64
			combined bool
		}
		var changes []change
		now := int64(1e15)
		for step := 0; step < 4000; step++ {
			now += rng.Int64N(W / 50)
			if rng.IntN(300) == 0 {
				next := mustNew(t, Config{Algorithm: BoundedLog, Limit: limits[rng.IntN(len(limits))], Window: time.Second, Tolerance: tol, Counter: "c"})
				// combined: to holds fewer entries than from keeps.
				dst := make([]int64, next.Words())
				exact := next.(*boundedLog).convert(cur.(*boundedLog), st, dst, now)
				changes = append(changes, change{at: now, m: cur.(*boundedLog).m, combined: !exact})
				st = dst
				cur = next
			}
			L := cur.Config().Limit
			cost := 1 + rng.Int64N(max(1, L/4))
			var inWindow int64
			for _, a := range accepted {
				if a.t > now-W {
					inWindow += a.c
				}
			}
			d := cur.Decide(st, now, cost)
			m := cur.(*boundedLog).m
			recentCombined := false
			for _, c := range changes {
				if c.at > now-W {
					m = max(m, c.m)
					recentCombined = recentCombined || c.combined
				}
			}
			if d.Allowed {
				accepted = append(accepted, unitsAt{now, cost})
				if inWindow+cost > L+m {
					t.Fatalf("seed %d step %d: accepted %d units in the last window, bound %d+%d; changes %+v now %d", seed, step, inWindow+cost, L, m, changes[max(0, len(changes)-3):], now)
				}
			} else if inWindow+cost <= L && d.Reason == ReasonOverLimit && !recentCombined {
				t.Fatalf("seed %d step %d: rejected with %d+%d <= %d in the window (changes %v)", seed, step, inWindow, cost, L, changes)
			}
			// Nothing is lost: the entries after the oldest hold at least
			// the units accepted after its first timestamp, and the open
			// entry never holds more than m (Decide would lose the excess
			// when it closes it).
			checkLossless(t, cur.(*boundedLog), st, accepted, seed, step)
			accepted = slices.DeleteFunc(accepted, func(a unitsAt) bool { return a.t <= now-2*W })
		}
	}
}

// TestConvertBucketKeepsDebt: the debt of a bucket is kept in units,
// rounded up, across any change of its parameters.
func TestConvertBucketKeepsDebt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		from := mustNew(t, Config{Algorithm: TokenBucket, Limit: 1 + rng.Int64N(1000), Window: time.Duration(1+rng.Int64N(60)) * time.Second, Counter: "c"})
		to := mustNew(t, Config{Algorithm: TokenBucket, Limit: 1 + rng.Int64N(1000), Window: time.Duration(1+rng.Int64N(60)) * time.Second, Counter: "c"})
		st := make([]int64, 2)
		now := int64(1e15)
		for range rng.IntN(50) {
			now += rng.Int64N(int64(time.Second))
			from.Decide(st, now, 1+rng.Int64N(3))
		}
		fb, tb := from.(*bucket), to.(*bucket)
		debt := max(0, st[0]-now) // in from's ns
		units := ceilDiv(debt, fb.interval)
		got := converted(t, from, to, st, now)
		want := now + min(units*tb.interval, 2*tb.span)
		if debt == 0 {
			want = st[0]
		}
		if got[0] != want || got[1] != st[1] {
			t.Fatalf("converted %v -> %v, want tat %d", st, got, want)
		}
		r := to.Peek(got, now, 1)
		if wantRem := tb.capacity - units - 1; units < tb.capacity && r.Remaining != wantRem {
			t.Fatalf("remaining after conversion %d, want %d (capacity %d, %d units of debt)", r.Remaining, wantRem, tb.capacity, units)
		}
	}
}

// TestConvertRefusesOtherIdentity: a different window or algorithm is not
// converted.
func TestConvertRefusesOtherIdentity(t *testing.T) {
	a := mustNew(t, Config{Algorithm: BoundedLog, Limit: 10, Window: time.Second, Counter: "c"})
	for _, c := range []Config{
		{Algorithm: BoundedLog, Limit: 10, Window: 2 * time.Second, Counter: "c"},
		{Algorithm: BoundedLog, Limit: 20, Window: time.Second, Counter: "d"},
		{Algorithm: BoundedLog, Limit: 20, Window: time.Second},
		{Algorithm: FixedWindow, Limit: 10, Window: time.Second, Counter: "c"},
		{Algorithm: SlidingLog, Limit: 10, Window: time.Second, Counter: "c"},
	} {
		b := mustNew(t, c)
		if convert(a, b, make([]int64, a.Words()), 0, make([]int64, b.Words())) {
			t.Errorf("Convert to %+v succeeded", c)
		}
	}
}

type unitsAt struct{ t, c int64 }

func checkLossless(t *testing.T, a *boundedLog, st []int64, accepted []unitsAt, seed uint64, step int) {
	t.Helper()
	w := make([]int64, a.words)
	a.expand(st, w)
	n := w[0]
	if n == 0 {
		return
	}
	if open := w[2+3*(n-1)+2]; open > a.m {
		t.Fatalf("seed %d step %d: the open entry holds %d > m = %d", seed, step, open, a.m)
	}
	if n < 2 {
		return
	}
	first1 := w[2+3+0] // the second entry's first timestamp
	var held, truth int64
	for i := int64(1); i < n; i++ {
		held += w[2+3*i+2]
	}
	for _, u := range accepted {
		if u.t > first1 {
			truth += u.c
		}
	}
	if held < truth {
		t.Fatalf("seed %d step %d: entries after the oldest hold %d units, %d were accepted after its end", seed, step, held, truth)
	}
}
