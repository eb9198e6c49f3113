package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// checkFastPath runs random traffic through Decide on one state and through
// full, the decision without the shortcuts Decide takes, on a copy, with
// late Records and now and then a damaged word on both, and fails at the
// first decision or state in which they differ.
func checkFastPath(t *testing.T, alg Name, full func(a Algorithm, s []int64, now, cost int64) Decision) {
	forEachSeed(t, alg, func(t *testing.T, rng *rand.Rand, a Algorithm) {
		c := a.Config()
		fast, slow := make([]int64, a.Words()), make([]int64, a.Words())
		for i, e := range traffic(rng, 3000, int64(c.Window), max(1, c.Limit/3)) {
			switch r := rng.IntN(100); {
			case r < 5: // an event another node took, often late
				at := e.t - rng.Int64N(int64(c.Window))
				a.Record(fast, at, e.cost)
				a.Record(slow, at, e.cost)
			case r < 7: // a damaged word
				w, v := rng.IntN(len(fast)), rng.Int64()>>rng.IntN(64)
				fast[w], slow[w] = v, v
			}
			cost := e.cost
			if rng.IntN(50) == 0 {
				cost = []int64{0, -1, c.Limit + 1}[rng.IntN(3)]
			}
			before := slices.Clone(slow)
			want := full(a, slow, e.t, cost)
			got := a.Decide(fast, e.t, cost)
			if got != want || !slices.Equal(fast, slow) {
				t.Fatalf("event %d (t %d cost %d) on %v:\nDecide %+v %v\nfull   %+v %v", i, e.t, cost, before, got, fast, want, slow)
			}
		}
	})
}

// TestBoundedLogFastPath checks that bounded-log's Decide, which decides the
// common cases without decide's loops, decides and records exactly as
// decide does.
func TestBoundedLogFastPath(t *testing.T) {
	checkFastPath(t, BoundedLog, func(a Algorithm, s []int64, now, cost int64) Decision {
		return a.(*boundedLog).decide(s, now, cost, true)
	})
}

// TestBoundedLogUsedWords checks that no word of a state at or past
// UsedWords is nonzero, through random traffic with late Records.
func TestBoundedLogUsedWords(t *testing.T) {
	forEachSeed(t, BoundedLog, func(t *testing.T, rng *rand.Rand, alg Algorithm) {
		a, c := alg.(*boundedLog), alg.Config()
		s := make([]int64, a.Words())
		short := 0
		for i, e := range traffic(rng, 3000, int64(c.Window), max(1, c.Limit/3)) {
			if rng.IntN(20) == 0 {
				a.Record(s, e.t-rng.Int64N(int64(c.Window)), e.cost)
			} else {
				a.Decide(s, e.t, e.cost)
			}
			u := a.UsedWords(s)
			if got := lastNonzero(s); got > u {
				t.Fatalf("event %d: word %d is nonzero, UsedWords %d: %v", i, got-1, u, s)
			}
			if u < len(s) {
				short++
			}
		}
		if short == 0 {
			t.Fatalf("UsedWords was never shorter than the state")
		}
	})
}

// TestDirectPrefix runs random traffic (late Records, bad costs, damaged words
// included) through Decide on a whole state and, first, through
// bounded-log's Direct.DecideInto on its first 3 or 7 words when the rest are zero:
// when DecideInto decides, its decision and writes must be Decide's; when
// it does not, it must have changed nothing.
func TestDirectPrefix(t *testing.T) {
	total := 0
	forEachSeed(t, BoundedLog, func(t *testing.T, rng *rand.Rand, a Algorithm) {
		x, ok := directOf(a)
		if !ok || !x.Prefix() {
			t.Fatal("no prefix Direct form for bounded-log")
		}
		if f, _ := directOf(mustNew(t, Config{Algorithm: FixedWindow, Limit: 5, Window: 1e9})); f.Prefix() {
			t.Fatal("a prefix Direct form for fixed-window")
		}
		c := a.Config()
		s := make([]int64, a.Words())
		decided := 0
		for i, e := range traffic(rng, 3000, int64(c.Window), max(1, c.Limit/3)) {
			switch r := rng.IntN(100); {
			case r < 3:
				a.Record(s, e.t-rng.Int64N(int64(c.Window)), e.cost)
			case r < 5:
				s[rng.IntN(4)] = rng.Int64() >> rng.IntN(64)
			}
			cost := e.cost
			if rng.IntN(50) == 0 {
				cost = []int64{0, -1, c.Limit + 1}[rng.IntN(3)]
			}
			want := slices.Clone(s)
			wd := a.Decide(want, e.t, cost)
			for _, k := range []int{3, 7} {
				if lastNonzero(s) > k || len(s) < k {
					continue
				}
				p := slices.Clone(s[:k])
				var d Decision
				if !x.DecideInto(&d, p, e.t, cost) {
					if !slices.Equal(p, s[:k]) {
						t.Fatalf("event %d: DecideInto on %d words declined but wrote %v (was %v)", i, k, p, s[:k])
					}
					continue
				}
				decided++
				if d != wd || !slices.Equal(p, want[:k]) || lastNonzero(want) > k {
					t.Fatalf("event %d (t %d cost %d) on %v:\nDecideInto %+v %v\nDecide     %+v %v", i, e.t, cost, s[:k], d, p, wd, want[:lastNonzero(want)])
				}
			}
			s = want
		}
		total += decided
	})
	if total == 0 {
		t.Fatal("DecideInto never decided")
	}
	t.Logf("DecideInto decided %d times", total)
}
