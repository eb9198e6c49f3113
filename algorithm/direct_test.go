package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestDirectMatchesDecide drives each algorithm with a Direct form through
// DecideInto and through the interface's Decide side by side, from the same
// states (valid ones, and arbitrary words a corrupt store might hand back),
// at times that step forward, jump windows and go back, with good and bad
// costs: the decisions and the states must be identical. DecideInto must
// also overwrite every field of a Decision that held another's.
func TestDirectMatchesDecide(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: FixedWindow, Limit: 5, Window: time.Second},
		{Algorithm: FixedWindow, Limit: MaxLimit, Window: time.Hour},
		{Algorithm: WeightedWindow, Limit: 7, Window: time.Second},
		{Algorithm: WeightedWindow, Limit: 1, Window: time.Millisecond},
		{Algorithm: TokenBucket, Limit: 5, Window: time.Second, Capacity: 3},
		{Algorithm: GCRA, Limit: 5, Window: time.Second, Burst: 2},
		{Algorithm: GCRA, Limit: MaxLimit, Window: time.Hour, Burst: MaxLimit},
	} {
		a, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		dir, ok := directOf(a)
		if !ok || dir.Prefix() {
			t.Fatalf("%s has no Direct form", c.Algorithm)
		}
		r := rand.New(rand.NewPCG(1, uint64(c.Limit)))
		viaDecide := make([]int64, a.Words())
		viaDirect := make([]int64, a.Words())
		now := int64(1_000) * int64(time.Second)
		for step := range 20_000 {
			switch x := r.IntN(100); {
			case x < 2:
				for i := range viaDecide { // a corrupt or foreign state
					viaDecide[i] = int64(r.Uint64()) >> r.IntN(64)
				}
				copy(viaDirect, viaDecide)
			case x < 5:
				now -= r.Int64N(int64(c.Window)) // the clock goes back
			case x < 10:
				now += r.Int64N(3 * int64(c.Window))
			default:
				now += r.Int64N(int64(c.Window) / 8)
			}
			cost := int64(1 + r.IntN(3))
			switch r.IntN(20) {
			case 0:
				cost = int64(r.IntN(2)) - 1 // 0 or -1
			case 1:
				cost = c.Limit + 1 + r.Int64N(10)
			}
			want := a.Decide(viaDecide, now, cost)
			got := Decision{Allowed: !want.Allowed, Limit: -1, Remaining: -1, ResetAfter: -1, RetryAfter: -1, Delay: -1, Reason: "stale"}
			dir.DecideInto(&got, viaDirect, now, cost)
			if got != want || !slices.Equal(viaDirect, viaDecide) {
				t.Fatalf("%s step %d (now %d, cost %d): DecideInto %+v state %v, Decide %+v state %v",
					c.Algorithm, step, now, cost, got, viaDirect, want, viaDecide)
			}
		}
	}
	for _, name := range []Name{SlidingWindow, SlidingLog, LeakyBucket, Concurrency} {
		a, err := New(Config{Algorithm: name, Limit: 10, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := directOf(a); ok {
			t.Errorf("%s has a Direct method it should not have", name)
		}
	}
}

// directOf returns a's Direct form, found as a store finds it.
func directOf(a Algorithm) (Direct, bool) {
	x, ok := a.(interface{ Direct() Direct })
	if !ok {
		return Direct{}, false
	}
	return x.Direct(), true
}
